"""The one thing pyproject.toml cannot say yet without an experimental table: the compiled line counter.

``rlwatch.logs._newlines`` (see rlwatch/logs/newlines.py) is optional: where no C compiler or no Python headers are
found the build goes on without it, and the same rules run in Python.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("rlwatch.logs._newlines", ["rlwatch/logs/_newlines.c"], optional=True)])
