"""The compiled part of the package: ``auditor.dump._dumpv2``, the inner loop of ``txn-audit dump``
for log segments (auditor/dump/_dumpv2.c), and the package list: ``auditor`` and its subpackages, with the
top-level ``rules/`` folder installed as ``auditor.rules`` (the rule catalog under the project's own
namespace: a module named ``rules`` at the top of site-packages is a name any other package could take).
Everything else is in pyproject.toml.

The extension is optional: without a C compiler the package installs without it and ``dump`` takes its Python
path, which writes the same bytes (tests/test_dump_native.py checks that it was built where the tests run).
"""

from setuptools import Extension, find_packages, setup

RULES = "auditor.rules"

setup(packages=[*find_packages(include=["auditor", "auditor.*"]), RULES],
      package_dir={RULES: "rules"},
      ext_modules=[Extension("auditor.dump._dumpv2", ["auditor/dump/_dumpv2.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"])])
