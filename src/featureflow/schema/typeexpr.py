"""Parser of the Mojo type expressions ``mojo doc`` prints for schema fields.

``mojo doc`` gives each struct field's type as text, with compile-time string
parameters spelled ``StringSpan("us")``. The grammar a schema may use::

    type  := NAME [ "[" arg ("," arg)* "]" ]
    arg   := type | STRING | NAME "(" STRING ")"

A small tokenizer and a recursive-descent parser turn the text into a tree;
:func:`field_type` then maps the tree onto the schema model. Errors raise
:class:`TypeSyntaxError` with what was expected; the reader adds file and line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from featureflow.schema.model import (
    TIME_UNITS,
    ListType,
    Role,
    Scalar,
    ScalarType,
    TimestampType,
    ValueType,
)

_PUNCTUATION = "[](),"


class TypeSyntaxError(ValueError):
    """A field type is not one a feature schema allows; ``expected`` says what would be."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


@dataclass(frozen=True)
class _Token:
    kind: str  # "name", "string", or the punctuation character itself
    text: str


@dataclass(frozen=True)
class TypeNode:
    """``name[args...]``; a string argument is a ``str``."""

    name: str
    args: tuple[TypeNode | str, ...] = ()


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            i += 1
        elif char in _PUNCTUATION:
            tokens.append(_Token(char, char))
            i += 1
        elif char == '"':
            end = i + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            if end >= len(text):
                raise TypeSyntaxError(f"a closing quote in type {text!r}")
            try:
                value = json.loads(text[i : end + 1])
            except ValueError:
                raise TypeSyntaxError(f"a plain string literal in type {text!r}") from None
            tokens.append(_Token("string", str(value)))
            i = end + 1
        elif char.isalnum() or char in "_.":
            end = i
            while end < len(text) and (text[end].isalnum() or text[end] in "_."):
                end += 1
            tokens.append(_Token("name", text[i:end]))
            i = end
        else:
            raise TypeSyntaxError(f"a type name, not {char!r}, in type {text!r}")
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0

    def _peek(self) -> _Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self, kind: str) -> _Token:
        token = self._peek()
        if token is None or token.kind != kind:
            found = "the end" if token is None else repr(token.text)
            raise TypeSyntaxError(f"{kind!r} but found {found} in type {self.text!r}")
        self.pos += 1
        return token

    def parse(self) -> TypeNode:
        node = self._type()
        if self._peek() is not None:
            raise TypeSyntaxError(f"the end of type {self.text!r}")
        return node

    def _type(self) -> TypeNode:
        # ``featureflow_schema.EntityKey`` and ``EntityKey`` mean the same.
        name = self._take("name").text.rsplit(".", 1)[-1]
        args: list[TypeNode | str] = []
        token = self._peek()
        if token is not None and token.kind == "[":
            self.pos += 1
            args.append(self._arg())
            while (token := self._peek()) is not None and token.kind == ",":
                self.pos += 1
                args.append(self._arg())
            self._take("]")
        return TypeNode(name, tuple(args))

    def _arg(self) -> TypeNode | str:
        token = self._peek()
        if token is not None and token.kind == "string":
            self.pos += 1
            return token.text
        node = self._type()
        token = self._peek()
        if not node.args and token is not None and token.kind == "(":
            # StringSpan("us"), StaticString("UTC"): a wrapped string parameter.
            self.pos += 1
            value = self._take("string").text
            self._take(")")
            return value
        return node


def parse_type(text: str) -> TypeNode:
    """Parse one type expression into a tree; raises TypeSyntaxError."""
    return _Parser(text).parse()


_SCALARS = ", ".join(s.value for s in Scalar)
_VALUE_TYPES = f"{_SCALARS}, List[T] or Timestamp[unit, zone]"


def _one_type_arg(node: TypeNode, what: str) -> TypeNode:
    if len(node.args) != 1 or not isinstance(node.args[0], TypeNode):
        raise TypeSyntaxError(f"{node.name}[T] with one type T ({what})")
    return node.args[0]


def _timestamp(node: TypeNode) -> TimestampType:
    if len(node.args) != 2 or not all(isinstance(a, str) for a in node.args):
        raise TypeSyntaxError(f'{node.name}["unit", "zone"], e.g. {node.name}["us", "UTC"]')
    unit, zone = (str(a) for a in node.args)
    if unit not in TIME_UNITS:
        raise TypeSyntaxError(f"a time unit among {', '.join(TIME_UNITS)}, not {unit!r}")
    if not zone:
        raise TypeSyntaxError('a time zone name such as "UTC"')
    return TimestampType(unit, zone)


def _element_type(node: TypeNode) -> ScalarType | TimestampType:
    if node.name in Scalar.__members__.values() and not node.args:
        return ScalarType(Scalar(node.name))
    if node.name == "Timestamp":
        return _timestamp(node)
    raise TypeSyntaxError(
        f"{_SCALARS} or Timestamp[unit, zone], not {node.name}{'[...]' if node.args else ''}"
    )


def _value_type(node: TypeNode) -> ValueType:
    if node.name == "List":
        return ListType(_element_type(_one_type_arg(node, "the element type")))
    if node.name == "Timestamp" or node.name in Scalar.__members__.values():
        return _element_type(node)
    raise TypeSyntaxError(f"{_VALUE_TYPES}, not {node.name}{'[...]' if node.args else ''}")


def field_type(text: str) -> tuple[ValueType, Role, bool]:
    """Map a field's type text to ``(value type, role, nullable)``.

    ``Optional[...]`` may wrap everything; inside it, ``EntityKey[T]`` or
    ``EventTimestamp[unit, zone]`` give the role, otherwise the field is a
    feature. Raises TypeSyntaxError naming the expected form.
    """
    node = parse_type(text)
    nullable = node.name == "Optional"
    if nullable:
        node = _one_type_arg(node, "the type that may be null")
    if node.name == "EntityKey":
        return _value_type(_one_type_arg(node, "the key's type")), Role.ENTITY_KEY, nullable
    if node.name == "EventTimestamp":
        return _timestamp(node), Role.EVENT_TIMESTAMP, nullable
    return _value_type(node), Role.FEATURE, nullable
