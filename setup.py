"""What pyproject.toml cannot say yet without an experimental table: the compiled parts of the event path.

``rlwatch.logs._newlines`` (rlwatch/logs/newlines.py) counts lines; ``rlwatch.logs._eventpath`` (a Cython module,
rlwatch/logs/_eventpath.pyx) is the compiled event path (rlwatch/logs/events.py). The rule modules in ``COMPILED``
are compiled from their own .py text (Cython's pure-Python mode, with the C types in the .pxd beside each): the
extension lands beside the .py and is imported in its place, and the event path cimports from it, so each such rule
is written once for both paths. All are optional: where no C compiler, no Python headers or no Cython are found the
build goes on without them, and the same rules run in Python (``RLWATCH_NATIVE=0`` picks the Python event path). A
platform wheel (``[tool.cibuildwheel]`` in pyproject.toml) sets ``RLWATCH_REQUIRE_NATIVE=1``: there a failed compile
fails the build, so no wheel ships without them.
"""

import os

from setuptools import Extension, setup

OPTIONAL = os.environ.get("RLWATCH_REQUIRE_NATIVE", "0") != "1"
# Rule modules compiled from their .py (each with a .pxd): built before the event path that cimports them.
COMPILED = (
    "torchrun_report",
    "signatures",
    "incidents",
    "areal_lines",
    "prefixes",
    "timestamps",
    "counting",
)


def _event_path() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:  # a build without Cython (build isolation off and none installed): the Python path runs
        if not OPTIONAL:
            raise
        return []
    exts = [Extension(f"rlwatch.logs.{name}", [f"rlwatch/logs/{name}.py"], optional=OPTIONAL) for name in COMPILED]
    exts.append(Extension("rlwatch.logs._eventpath", ["rlwatch/logs/_eventpath.pyx"], optional=OPTIONAL))
    built = cythonize(exts, compiler_directives={"language_level": "3"}, quiet=True)
    for e in built:
        e.optional = OPTIONAL
    return list(built)


setup(
    ext_modules=[
        Extension("rlwatch.logs._newlines", ["rlwatch/logs/_newlines.c"], optional=OPTIONAL),
        *_event_path(),
    ]
)
