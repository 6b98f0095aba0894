"""The bad-input errors: a message for a person, with the field it is about in front, and PyYAML's
multi-line errors turned into one line naming the file, line and column."""

from __future__ import annotations

import pytest
import yaml

from devshare.model.errors import (
    InvalidAnnotation,
    InvalidDevice,
    InvalidInput,
    InvalidQuantity,
    InvalidRequest,
    yaml_error,
)


def test_the_field_leads_the_message() -> None:
    e = InvalidInput("must be 1 or more", field="spec.replicas")
    assert str(e) == "spec.replicas: must be 1 or more"
    assert (e.field, e.message) == ("spec.replicas", "must be 1 or more")
    bare = InvalidInput("no Node object")
    assert str(bare) == "no Node object" and bare.field is None


@pytest.mark.parametrize("kind", [InvalidQuantity, InvalidRequest, InvalidDevice, InvalidAnnotation])
def test_every_kind_is_an_invalid_input_and_a_value_error(kind: type[InvalidInput]) -> None:
    with pytest.raises(InvalidInput, match=r"^where: what$"):
        raise kind("what", field="where")
    assert issubclass(kind, ValueError)


def yaml_failure(text: str) -> yaml.YAMLError:
    with pytest.raises(yaml.YAMLError) as err:
        yaml.safe_load(text)
    return err.value


def test_a_yaml_error_is_one_line_with_file_line_and_column() -> None:
    e = yaml_error(yaml_failure("kind: Node\nmetadata: {name: a\n  x: [\n"), "cluster.yaml")
    assert isinstance(e, InvalidInput)
    text = str(e)
    assert "\n" not in text
    assert text.startswith("cluster.yaml, line 3, column 4: not valid YAML: ")
    assert "<unicode string>" not in text


def test_a_yaml_error_keeps_its_context() -> None:
    e = yaml_error(yaml_failure("a: [1, 2\nb: 3\n"), "p.yaml")
    assert e.field is not None and e.field.startswith("p.yaml, line ")
    assert "(while parsing a flow sequence)" in e.message


def test_an_error_without_a_position_names_the_file_alone() -> None:
    e = yaml_error(ValueError("first line\nsecond line"), "x.yaml")
    assert str(e) == "x.yaml: not valid YAML: first line"
    assert str(yaml_error(ValueError(""), "x.yaml")) == "x.yaml: not valid YAML: syntax error"
