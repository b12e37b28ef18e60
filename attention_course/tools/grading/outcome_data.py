"""A child's outcome as the grader accepts it: plain data, every size checked before allocating.

The zygote hands the grader the bytes of a child's last outcome (``zygote_main.dump_outcome`` wrote
them): a magic line, the length of a JSON structure (capped), the structure, then raw tensor bytes,
each tensor declared by dtype and shape and checked against the caps and the outcome's length before
anything is allocated. Only the plain-data grammar of :mod:`attention_course.checks.calls` is
accepted (dict, list, str, int, float, bool, None and dense CPU ``torch.Tensor``), with caps on
sizes and depth. Nothing is unpickled or imported. (The grader once used
``torch.load(weights_only=True)``, whose allowed types let a 908-byte file make it allocate 2.66 GB.)
"""
from __future__ import annotations

import json
from typing import Any

import torch

MAX_OUTCOME_BYTES = 64 * 1024 * 1024
MAX_STRUCTURE_BYTES = 4 * 1024 * 1024  # the JSON part: results are small apart from their tensors
OUTCOME_MAGIC = b"ACOUT1\n"
OUTCOME_DTYPES = {name: getattr(torch, name) for name in (
    "float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
    "complex64", "complex128")}
MAX_DIMS = 8
MAX_TENSOR_ELEMENTS = 4_000_000
MAX_TOTAL_ELEMENTS = 16_000_000
MAX_STRING = 20_000
MAX_ITEMS = 100_000
MAX_DEPTH = 12


class InvalidOutcome(ValueError):
    """A child's outcome file that is not plain data of the expected shape."""



# ------------------------------------------------------------------ validation


def _decode(raw: bytes) -> Any:
    """The structure and tensors of an ``outcomes.bin``; every size is checked before allocating."""
    start = len(OUTCOME_MAGIC) + 8
    if not raw.startswith(OUTCOME_MAGIC) or len(raw) < start:
        raise InvalidOutcome("not an outcome file")
    size = int.from_bytes(raw[len(OUTCOME_MAGIC):start], "little")
    if size > MAX_STRUCTURE_BYTES or start + size > len(raw):
        raise InvalidOutcome("the structure's declared size does not fit")
    try:
        tree = json.loads(raw[start:start + size].decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise InvalidOutcome(f"not plain data: {type(error).__name__}") from None
    data = memoryview(raw)[start + size:]
    budget = [MAX_TOTAL_ELEMENTS]

    def tensor(record) -> torch.Tensor:
        if type(record) is not list or len(record) != 3:
            raise InvalidOutcome("malformed tensor record")
        offset, dtype_name, shape = record
        if type(offset) is not int or offset < 0 or type(dtype_name) is not str or type(shape) is not list:
            raise InvalidOutcome("malformed tensor record")
        dtype = OUTCOME_DTYPES.get(dtype_name)
        if dtype is None:
            raise InvalidOutcome(f"tensor dtype {dtype_name[:40]!r} is not allowed")
        if len(shape) > MAX_DIMS or any(type(n) is not int or n < 0 or n > MAX_TENSOR_ELEMENTS for n in shape):
            raise InvalidOutcome("malformed tensor shape")
        numel = 1
        for n in shape:
            numel *= n
        if numel > MAX_TENSOR_ELEMENTS:
            raise InvalidOutcome("tensor too large")
        budget[0] -= numel
        if budget[0] < 0:
            raise InvalidOutcome("tensors too large in total")
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        if offset + nbytes > len(data):
            raise InvalidOutcome("a tensor's bytes lie outside the file")
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(data[offset:offset + nbytes]), dtype=dtype).reshape(shape)

    def walk(value, depth):
        if depth > MAX_DEPTH:
            raise InvalidOutcome("nested too deeply")
        if type(value) is dict:
            if len(value) == 1 and "__tensor__" in value and type(value["__tensor__"]) is list:
                return tensor(value["__tensor__"])
            return {key: walk(item, depth + 1) for key, item in value.items()}
        if type(value) is list:
            return [walk(item, depth + 1) for item in value]
        return value

    return walk(tree, 0)


def load_outcome(raw: bytes) -> dict:
    """Decode a child's ``outcomes.bin`` (data only) and validate the result's structure."""
    data = _decode(raw)
    budget = [MAX_TOTAL_ELEMENTS, MAX_ITEMS]
    _plain(data, 0, budget)
    if type(data) is not dict or data.get("phase") not in ("setup", "exercise", "missing", "calls", "done"):
        raise InvalidOutcome("unexpected top-level structure")
    if data.get("error") is not None:
        err = data["error"]
        if type(err) is not dict or not all(type(err.get(k)) is str for k in ("type", "message", "where")):
            raise InvalidOutcome("malformed error record")
    if type(data.get("defined", [])) is not list or not all(type(x) is str for x in data.get("defined", [])):
        raise InvalidOutcome("malformed list of defined names")
    outcomes = data.get("outcomes")
    if type(outcomes) is not list:
        raise InvalidOutcome("outcomes is not a list")
    for check_outcomes in outcomes:
        if type(check_outcomes) is not list:
            raise InvalidOutcome("a check's outcomes is not a list")
        for outcome in check_outcomes:
            _validate_call_outcome(outcome)
    return data


def _plain(value: Any, depth: int, budget: list) -> None:
    if depth > MAX_DEPTH:
        raise InvalidOutcome("nested too deeply")
    budget[1] -= 1
    if budget[1] < 0:
        raise InvalidOutcome("too many items")
    kind = type(value)
    if value is None or kind in (bool, int, float):
        return
    if kind is str:
        if len(value) > MAX_STRING:
            raise InvalidOutcome("string too long")
        return
    if kind is list:
        for item in value:
            _plain(item, depth + 1, budget)
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or len(key) > 500:
                raise InvalidOutcome("dict key is not a short string")
            _plain(item, depth + 1, budget)
        return
    if kind is torch.Tensor:
        if value.layout != torch.strided or value.device.type != "cpu" or value.is_quantized:
            raise InvalidOutcome("tensor is not a dense CPU tensor")
        if value.numel() > MAX_TENSOR_ELEMENTS:
            raise InvalidOutcome("tensor too large")
        budget[0] -= value.numel()
        if budget[0] < 0:
            raise InvalidOutcome("tensors too large in total")
        return
    raise InvalidOutcome(f"type {kind.__name__} is not allowed")


def _value(value: Any) -> None:
    """The grammar of :func:`attention_course.checks.calls.to_plain`."""
    if value is None or type(value) in (bool, int, float, str, torch.Tensor):
        return
    if type(value) is dict and len(value) == 1:
        (key, inner), = value.items()
        if key in ("__seq__", "__list__") and type(inner) is list:
            for item in inner:
                _value(item)
            return
        if key == "__dict__" and type(inner) is dict:
            for item in inner.values():
                _value(item)
            return
        if key == "__unsupported__" and type(inner) is str:
            return
    raise InvalidOutcome("a returned value is not in the plain-data format")


def _validate_call_outcome(outcome: Any) -> None:
    if type(outcome) is not dict:
        raise InvalidOutcome("a call outcome is not a dict")
    status = outcome.get("status")
    if status == "raised":
        if not all(type(outcome.get(k)) is str for k in ("error_type", "message")):
            raise InvalidOutcome("a raised outcome lacks its error type or message")
        mro = outcome.get("error_mro", [])
        if type(mro) is not list or not all(type(x) is str for x in mro):
            raise InvalidOutcome("malformed error_mro")
        if type(outcome.get("note", "")) is not str:
            raise InvalidOutcome("malformed note")
        return
    if status != "ok" or "value" not in outcome:
        raise InvalidOutcome("a call outcome has no status")
    _value(outcome["value"])
    if "grads" in outcome:
        _value(outcome["grads"])
    extras = outcome.get("extras", {})
    if type(extras) is not dict:
        raise InvalidOutcome("extras is not a dict")
    for key in outcome:
        if key not in ("status", "value", "grads", "extras"):
            raise InvalidOutcome(f"unexpected key {key!r} in a call outcome")


