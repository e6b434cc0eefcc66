"""The base of every config section: unknown keys are errors, values are frozen, each field's
docstring is its documentation, and NaN or inf is rejected in every number."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)
