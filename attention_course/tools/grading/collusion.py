"""Identical outputs on different hidden inputs: collusion that code similarity cannot see.

With hidden inputs drawn per student (``grade --per-student``), two students' correct outputs on a
hidden check differ, because their inputs differ. When two students' outputs are bit for bit the
same although the reference's outputs for their inputs are not, at least one of them did not
compute its own: outputs passed between students, a shared table of answers, or a program that
answers without reading its inputs. The grader keeps, per exercise, a digest of each hidden check's
outputs and of the reference's (:func:`outcome_digest`, in the graded record); the similarity
report (``similarity CLASS --graded DIR``) lists every such group (:func:`same_output_groups`).
"""
from __future__ import annotations

import hashlib
import json
from typing import Optional

import torch

SAME_OUTPUTS = "the same outputs as a classmate on other inputs"


def _feed(digest, value) -> None:
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        digest.update(f"T{tensor.dtype}{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    elif isinstance(value, dict):
        digest.update(b"{")
        for key in sorted(value, key=str):
            digest.update(json.dumps(str(key)).encode())
            _feed(digest, value[key])
        digest.update(b"}")
    elif isinstance(value, (list, tuple)):
        digest.update(b"[")
        for item in value:
            _feed(digest, item)
        digest.update(b"]")
    else:
        digest.update(json.dumps(value, default=repr).encode())


def outcome_digest(outcomes) -> Optional[str]:
    """A digest of one check's outcomes (every call's returned value and gradients); None when a
    call did not return normally (two students raising the same error say nothing)."""
    if not isinstance(outcomes, list) or not outcomes:
        return None
    digest = hashlib.sha256()
    for outcome in outcomes:
        if not isinstance(outcome, dict) or outcome.get("status") != "ok":
            return None
        _feed(digest, outcome.get("value"))
        _feed(digest, outcome.get("grads"))
    return digest.hexdigest()[:32]


def same_output_groups(outputs: dict) -> list:
    """[(label, check, [students])]: students whose outputs of a hidden check are identical while the
    reference's outputs for their inputs are not; in the order of the labels, then the checks."""
    found = {}
    for student, labels in outputs.items():
        for label, items in labels.items():
            for check, digest, reference in items:
                if digest:
                    found.setdefault((label, check, digest), {})[student] = reference
    groups = []
    for (label, check, _), students in sorted(found.items()):
        if len(students) > 1 and len(set(students.values())) > 1:
            groups.append((label, check, sorted(students)))
    return groups
