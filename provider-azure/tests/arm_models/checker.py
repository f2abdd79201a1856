"""Checks ARM request and response bodies against Azure's own models.

The models are those of Azure's official Python management SDKs (azure-mgmt-compute,
azure-mgmt-network, azure-mgmt-resource), generated from the same API specifications as ARM
itself: each property's wire name, type, whether it is required and whether it is read-only.

Protocol: one JSON object per line on stdin —
    {"model": "compute:VirtualMachine", "direction": "request" | "response", "body": {...}}
— answered by one JSON line on stdout: {"ok": true} or {"ok": false, "problems": ["<path>: why"]}.
A request may not carry unknown or read-only properties and must carry the required ones that
can be written; a response may not carry unknown properties and must carry the required ones.
"""

import datetime
import enum
import importlib
import json
import sys
import typing

PACKAGES = {
    "compute": "azure.mgmt.compute.models",
    "network": "azure.mgmt.network.models",
    "resource": "azure.mgmt.resource.resources.models",
}


# Properties whose extensible enum lists only some of the values Azure takes.
OPEN_ENDED = {"vmSize"}


def model_class(name):
    package, _, cls = name.partition(":")
    module = importlib.import_module(PACKAGES[package])
    return getattr(module, cls)


def is_model(cls):
    return isinstance(cls, type) and getattr(cls, "_is_model", False)


def rest_fields(cls):
    """Wire name -> (python attribute, rest field, annotation) of a model class."""
    try:
        cls()
    except Exception:  # noqa: BLE001 - building the class's field table is all that is wanted
        pass
    module = importlib.import_module(cls.__module__)
    package = importlib.import_module(cls.__module__.rsplit(".", 1)[0])
    hints = typing.get_type_hints(cls, {**vars(module), "_models": package})
    fields = {}
    for attr, field in getattr(cls, "_attr_to_rest_field", {}).items():
        fields[field._rest_name] = (attr, field, hints.get(attr, typing.Any))
    return fields


def optional(annotation):
    return typing.get_origin(annotation) is typing.Union and type(None) in typing.get_args(annotation)


def strip_optional(annotation):
    if optional(annotation):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        return rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]
    return annotation


def readonly(field):
    return field._visibility == ["read"]


def writable_on_create(field):
    return field._visibility is None or "create" in field._visibility


def check(value, annotation, direction, path, problems):
    annotation = strip_optional(annotation)
    origin = typing.get_origin(annotation)
    if annotation is typing.Any:
        return
    if value is None:
        problems.append(f"{path}: null")
        return
    if origin is typing.Union:
        choices = typing.get_args(annotation)
        # An extensible enum (str or one of its known values): this API version's values only,
        # but for the open-ended ones (VM sizes, which Azure adds without a new API version).
        enums = [c for c in choices if isinstance(c, type) and issubclass(c, enum.Enum)]
        if str in choices and isinstance(value, str) and enums:
            known = [member.value for e in enums for member in e]
            if value in known or path.rsplit(".", 1)[-1] in OPEN_ENDED:
                return
            problems.append(f"{path}: {value!r} is not one of {known}")
            return
        if str in choices and isinstance(value, str):
            return
        for choice in choices:
            attempt = []
            check(value, choice, direction, path, attempt)
            if not attempt:
                return
        problems.append(f"{path}: {json.dumps(value)[:80]} is none of {choices}")
        return
    if origin in (list, typing.List):
        (item,) = typing.get_args(annotation) or (typing.Any,)
        if not isinstance(value, list):
            problems.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for index, element in enumerate(value):
            check(element, item, direction, f"{path}[{index}]", problems)
        return
    if origin in (dict, typing.Dict):
        _, item = typing.get_args(annotation) or (str, typing.Any)
        if not isinstance(value, dict):
            problems.append(f"{path}: expected an object, got {type(value).__name__}")
            return
        for key, element in value.items():
            check(element, item, direction, f"{path}.{key}", problems)
        return
    if is_model(annotation):
        check_model(value, annotation, direction, path, problems)
        return
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        known = [member.value for member in annotation]
        if value not in known:
            problems.append(f"{path}: {value!r} is not one of {known}")
        return
    if annotation is bool:
        if not isinstance(value, bool):
            problems.append(f"{path}: expected a boolean, got {json.dumps(value)[:40]}")
        return
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{path}: expected an integer, got {json.dumps(value)[:40]}")
        return
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"{path}: expected a number, got {json.dumps(value)[:40]}")
        return
    if annotation is str:
        if not isinstance(value, str):
            problems.append(f"{path}: expected a string, got {json.dumps(value)[:40]}")
        return
    if annotation is datetime.datetime:
        if not isinstance(value, str):
            problems.append(f"{path}: expected a date-time string")
            return
        try:
            datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            problems.append(f"{path}: {value!r} is not an RFC 3339 date-time")
        return
    if annotation is bytes or annotation is bytearray:
        if not isinstance(value, str):
            problems.append(f"{path}: expected a base64 string")
        return
    problems.append(f"{path}: the checker does not know type {annotation!r}")


def check_model(value, cls, direction, path, problems):
    if not isinstance(value, dict):
        problems.append(f"{path}: expected an object ({cls.__name__}), got {type(value).__name__}")
        return
    fields = rest_fields(cls)
    for key, element in value.items():
        if key not in fields:
            problems.append(f"{path}.{key}: {cls.__name__} has no property {key!r}")
            continue
        _, field, annotation = fields[key]
        if direction == "request" and readonly(field):
            problems.append(f"{path}.{key}: read-only in {cls.__name__}; a client never sends it")
            continue
        check(element, annotation, direction, f"{path}.{key}", problems)
    for key, (_, field, annotation) in fields.items():
        if optional(annotation) or key in value:
            continue
        if direction == "request" and (readonly(field) or not writable_on_create(field)):
            continue
        problems.append(f"{path}.{key}: required in {cls.__name__}, missing")


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            message = json.loads(line)
            cls = model_class(message["model"])
            problems = []
            check_model(message["body"], cls, message["direction"], "$", problems)
            answer = {"ok": not problems, "problems": problems}
        except Exception as error:  # noqa: BLE001 - a bad message is answered, never fatal
            answer = {"ok": False, "problems": [f"checker: {type(error).__name__}: {error}"]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
