"""The compiled part of the package: ``auditor.cli._dumpv2``, the inner loop of ``txn-audit dump``
for log segments (auditor/cli/_dumpv2.c). Everything else is in pyproject.toml.

It is optional: without a C compiler the package installs without it and ``dump`` takes its Python
path, which writes the same bytes (tests/test_dump_native.py checks that it was built where the tests run).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("auditor.cli._dumpv2", ["auditor/cli/_dumpv2.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"])])
