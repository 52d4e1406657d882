"""AuditContext's attribute look-up: views, facts and helpers by name, and the class's own errors kept."""

from __future__ import annotations

from functools import cached_property

import pytest

from auditor.engine.context import AuditContext


class _Broken(AuditContext):
    @property
    def broken(self):
        return {}["missing"].real  # KeyError, not AttributeError: no look-up fallback involved

    @cached_property
    def inner(self):
        return object().no_such_thing  # AttributeError raised inside the property


def test_a_property_raising_attribute_error_shows_its_own_error(tmp_path):
    ctx = _Broken(None, str(tmp_path))
    with pytest.raises(AttributeError, match="no_such_thing"):
        ctx.inner
    with pytest.raises(KeyError):
        ctx.broken


def test_an_unknown_name_is_an_attribute_error_naming_it(tmp_path):
    with pytest.raises(AttributeError, match="'nonexistent_view'"):
        AuditContext(None, str(tmp_path)).nonexistent_view
