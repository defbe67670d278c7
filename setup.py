"""What pyproject.toml cannot say yet without an experimental table: the compiled parts of the event path.

``rlwatch.logs._newlines`` (rlwatch/logs/newlines.py) counts lines; ``rlwatch.logs._eventpath`` (a Cython module,
rlwatch/logs/_eventpath.pyx) is the compiled event path (rlwatch/logs/events.py). Both are optional: where no C
compiler, no Python headers or no Cython are found the build goes on without them, and the same rules run in
Python (``RLWATCH_NATIVE=0`` picks those too).
"""

from setuptools import Extension, setup


def _event_path() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:  # a build without Cython (build isolation off and none installed): the Python path runs
        return []
    ext = Extension("rlwatch.logs._eventpath", ["rlwatch/logs/_eventpath.pyx"], optional=True)
    built = cythonize([ext], compiler_directives={"language_level": "3"}, quiet=True)
    for e in built:
        e.optional = True
    return list(built)


setup(
    ext_modules=[
        Extension("rlwatch.logs._newlines", ["rlwatch/logs/_newlines.c"], optional=True),
        *_event_path(),
    ]
)
