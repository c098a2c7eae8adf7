"""ObjectMeta validation for the API server of tests/kube_api.py: label keys and values, as apimachinery checks them.

The apiserver runs ValidateObjectMeta on create and on every update (a patch included) and answers
422 Invalid, the object unchanged, for a label it refuses: `metadata.labels: Invalid value: "-1": …`.
The messages are apimachinery's (pkg/util/validation: IsQualifiedName, IsValidLabelValue).
"""

from __future__ import annotations

import json
import re

from tests.kube_semantics import Obj, Res, _invalid

LABEL_VALUE_CHARS = 63
QUALIFIED_NAME_CHARS = 63
SUBDOMAIN_CHARS = 253
_QUALIFIED_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = f"({_QUALIFIED_FMT})?"
_DNS_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = f"{_DNS_LABEL_FMT}(\\.{_DNS_LABEL_FMT})*"
_QUALIFIED_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """validation.RegexError, with its double spaces."""
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def label_value_errors(value: str) -> list[str]:
    """validation.IsValidLabelValue."""
    errs = [f"must be no more than {LABEL_VALUE_CHARS} characters"] if len(value) > LABEL_VALUE_CHARS else []
    if not re.fullmatch(_LABEL_VALUE_FMT, value):
        errs.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def qualified_name_errors(key: str) -> list[str]:
    """validation.IsQualifiedName: an optional DNS subdomain prefix and '/', then a name of at most 63 characters."""
    parts = key.split("/")
    if len(parts) > 2:
        rule = _regex_error(_QUALIFIED_MSG, _QUALIFIED_FMT, "MyName", "my.name", "123-abc")
        return [f"a qualified name {rule} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    errs: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if len(prefix) > SUBDOMAIN_CHARS:
                errs.append(f"prefix part must be no more than {SUBDOMAIN_CHARS} characters")
            if not re.fullmatch(_SUBDOMAIN_FMT, prefix):
                errs.append("prefix part " + _regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN_FMT, "example.com"))
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_CHARS:
        errs.append(f"name part must be no more than {QUALIFIED_NAME_CHARS} characters")
    if not re.fullmatch(_QUALIFIED_FMT, name):
        errs.append("name part " + _regex_error(_QUALIFIED_MSG, _QUALIFIED_FMT, "MyName", "my.name", "123-abc"))
    return errs


def validate_labels(res: Res, obj: Obj) -> None:
    """ValidateLabels on `metadata.labels`: 422 Invalid naming every key and value refused (keys in order)."""
    labels = obj["metadata"].get("labels") or {}
    causes: list[tuple[str, str, str]] = []
    for key in sorted(labels):
        value = labels[key]
        for msg in qualified_name_errors(str(key)):
            causes.append(("FieldValueInvalid", "metadata.labels", f"Invalid value: {json.dumps(key)}: {msg}"))
        for msg in label_value_errors(str(value)):
            causes.append(("FieldValueInvalid", "metadata.labels", f"Invalid value: {json.dumps(value)}: {msg}"))
    if causes:
        raise _invalid(res, obj["metadata"].get("name") or "", causes)
