"""One-off move (issue 18): split attention_course/exercises/chNN.py into chNN/exM_<name>.py.

    python tools/split_exercises.py            # writes the packages, removes chNN.py

What it does, per chapter module:

* the module docstring becomes ``chNN/__init__.py``'s docstring, which imports every
  exercise module in order;
* the statements before the first ``chNN_exM`` separator (imports aside) go to
  ``chNN/_common.py``; helpers that several chapters copied (``_gen``, ``_randint``,
  ``_shape``/``_shape_of``, ``_finite_then_close``, ``_same_parameters``, ``_tensors``,
  ``_ERROR_WEIGHT``) are dropped and their uses renamed to ``exercises/_kit.py``'s one copy;
* each section becomes ``exM_<snake name>.py`` with its parts in one order: the contract
  (the docstring: the solution notebook's statement of the exercise), the reference, the
  inputs of the checks, the kept mistakes each decorated with its hint
  (``@mistakes.keep(name, hint)``), the kept alternatives (``@alternatives.keep``), the
  registration. Helpers go right before the first part that uses them; a statement
  that another needs at import time is moved before it;
* names are resolved with ``symtable``: each module imports exactly the module-level
  names it uses, from ``_kit``, ``_common`` or the sibling exercise module that defines them.

Nothing inside a function, class or check changes except the renamed kit helpers and
the relative-import depth; the move is checked by comparing the bytecode of every
registered object before and after (tools/fingerprint_registry.py).
"""
from __future__ import annotations

import ast
import builtins
import json
import re
import symtable
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "attention_course" / "exercises"

KIT = {"_gen": "gen", "_randint": "randint", "_shape": "shape_of", "_shape_of": "shape_of",
       "_finite_then_close": "finite_then_close", "_same_parameters": "same_parameters",
       "_tensors": "tensors_of", "_ERROR_WEIGHT": "ERROR_WEIGHT"}
SEPARATOR = re.compile(r"^# ?[-=]{3,}.*?\b(ch\d\d_ex\d+)\b")
PURE_MARKER = re.compile(r"^# ?[-=]{3,}")
BUILTINS = set(dir(builtins)) | {"__name__", "__file__", "__doc__"}


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    return s.lower()


def renamed(text: str) -> str:
    for old, new in KIT.items():
        text = re.sub(rf"(?<![\w.]){re.escape(old)}(?!\w)", new, text)
    # one package deeper: from ..x -> from ...x
    return re.sub(r"(?m)^(\s*)from \.\.(?=[\w ])", r"\1from ...", text)


def refs_of(src: str) -> tuple[set, set, set]:
    """(defined, all referenced globals, referenced at import time) of one top-level statement."""
    table = symtable.symtable(src, "<stmt>", "exec")
    defined, used, now = set(), set(), set()
    for sym in table.get_symbols():
        if sym.is_assigned() or sym.is_imported():
            defined.add(sym.get_name())
        if sym.is_referenced():
            used.add(sym.get_name())
            now.add(sym.get_name())

    def walk(t, import_time):
        for child in t.get_children():
            child_now = import_time and child.get_type() == "class"
            for sym in child.get_symbols():
                if sym.is_global() and sym.is_referenced():
                    used.add(sym.get_name())
                    if child_now:
                        now.add(sym.get_name())
            walk(child, child_now)
    walk(table, True)
    return defined, used - BUILTINS, now - BUILTINS


class Stmt:
    def __init__(self, node, src, comments):
        self.node, self.src, self.comments = node, src, comments
        self.defined, self.used, self.now = refs_of(src)
        self.category = None
        self.prefix = ""  # a decorator line added in front (kept mistake / alternative)


def statements(text: str):
    """Top-level statements with their leading comments; the docstring apart."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    out, prev_end = [], 0
    body = tree.body
    doc = None
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        doc, prev_end, body = body[0].value.value, body[0].end_lineno, body[1:]
    for node in body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        gap = lines[prev_end:start - 1]
        comments = []
        for line in gap:
            if line.strip().startswith("#") and not PURE_MARKER.match(line.strip()):
                comments.append(line)
            elif not line.strip():
                comments = comments and comments + [line]
        while comments and not comments[-1].strip():
            comments.pop()
        src = "".join(lines[start - 1:node.end_lineno])
        out.append((start, Stmt(node, src, "".join(comments))))
        prev_end = node.end_lineno
    return doc, out, lines


def contract_of(notebook: Path, label: str) -> tuple[str, str]:
    nb = json.loads(notebook.read_text())
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and re.search(rf":label: {label}\s*$", text, re.M):
            m = re.search(r"```\{exercise\}[ \t]*([^\n]*)\n((?:[ \t]*:[\w-]+:[^\n]*\n)*)(.*?)\n```", text, re.S)
            return m.group(1).strip(), m.group(3).strip("\n")
    raise SystemExit(f"{notebook}: no statement of {label}")


def register_parts(stmt: Stmt):
    call = stmt.node.value.args[0]
    kw = {k.arg: k.value for k in call.keywords}
    return kw


def seg(src: str, node, base_line: int) -> str:
    """Source of node inside a statement's text whose first line is base_line (offsets are UTF-8 bytes)."""
    lines = [line.encode() for line in src.splitlines(keepends=True)]
    a, b = node.lineno - base_line, node.end_lineno - base_line
    if a == b:
        return lines[a][node.col_offset:node.end_col_offset].decode()
    return (lines[a][node.col_offset:] + b"".join(lines[a + 1:b]) + lines[b][:node.end_col_offset]).decode()


def col(src: str, node, base_line: int) -> int:
    """The character column of node (ast gives bytes)."""
    line = src.splitlines(keepends=True)[node.lineno - base_line].encode()
    return len(line[:node.col_offset].decode())


def reindent(text: str, old_col: int, new_col: int) -> str:
    first, *rest = text.split("\n")
    shift = new_col - old_col
    out = [first]
    for line in rest:
        if shift >= 0:
            out.append(" " * shift + line if line.strip() else line)
        else:
            cut = min(-shift, len(line) - len(line.lstrip(" ")))
            out.append(line[cut:])
    return "\n".join(out)


def split_chapter(path: Path) -> dict:
    chapter = path.stem  # ch03
    text = renamed(path.read_text())
    doc, stmts, lines = statements(text)
    seps = [(i + 1, SEPARATOR.match(line).group(1)) for i, line in enumerate(lines) if SEPARATOR.match(line)]
    labels = [label for _, label in seps]
    assert len(labels) == len(set(labels)), (path, labels)
    notebook = next((ROOT / "solutions").glob(f"{chapter[2:]}_*.ipynb"))

    imports, common, sections = [], [], {label: [] for label in labels}
    for start, st in stmts:
        if st.defined & set(KIT.values()) and isinstance(st.node, (ast.FunctionDef, ast.Assign)):
            continue  # a copied helper: _kit holds the one copy
        if isinstance(st.node, (ast.Import, ast.ImportFrom)):
            imports.append(st)
            continue
        owner = None
        for line, label in seps:
            if start > line:
                owner = label
        (common if owner is None else sections[owner]).append(st)

    # where each module-level name is defined
    where = {}
    for st in common:
        for n in st.defined:
            where[n] = "_common"
    modules = {}
    for label in labels:
        reg = [st for st in sections[label] if isinstance(st.node, ast.Expr)
               and isinstance(st.node.value, ast.Call) and getattr(st.node.value.func, "id", "") == "register"]
        assert len(reg) == 1, (label, len(reg))
        kw = register_parts(reg[0])
        name = kw["name"].value
        modules[label] = f"ex{label.split('_ex')[1]}_{snake(name)}"
        for st in sections[label]:
            for n in st.defined:
                assert n not in where, (label, n, where.get(n))
                where[n] = modules[label]
    import_names = {}
    for st in imports:
        for alias in st.node.names:
            import_names[(alias.asname or alias.name).split(".")[0]] = (st, alias)

    written = {}
    # ---------------------------------------------------------------- exercise modules
    for label in labels:
        mod = modules[label]
        body = sections[label]
        reg = next(st for st in body if isinstance(st.node, ast.Expr) and isinstance(st.node.value, ast.Call)
                   and getattr(st.node.value.func, "id", "") == "register")
        kw = register_parts(reg)
        by_name = {}
        for st in body:
            for n in st.defined:
                by_name.setdefault(n, st)
        reg.category = 5
        # the reference
        ref = kw["reference"]
        if isinstance(ref, ast.Name) and ref.id in by_name:
            by_name[ref.id].category = 1
        # the checks' inputs: every name the checks list uses
        check_names = set()
        for node in ast.walk(kw["checks"]):
            if isinstance(node, ast.Name):
                check_names.add(node.id)
        check_stmts = [by_name[n] for n in sorted(check_names, key=lambda n: by_name[n].node.lineno if n in by_name else 0)
                       if n in by_name]
        for st in check_stmts:
            if st.category is None:
                st.category = 2
        # kept mistakes and alternatives, with their text beside them
        kept_order = {3: [], 4: []}
        extra = []  # .add(...) statements
        for cat, key, keeper in ((3, "mistakes", "mistakes"), (4, "alternatives", "alternatives")):
            value = kw.get(key)
            if value is None:
                continue
            assert isinstance(value, ast.List), (label, key)
            for item in value.elts:
                assert isinstance(item, ast.Call) and not item.keywords and len(item.args) == 3, (label, key)
                nm, tx, impl = (seg(reg.src, a, reg.node.lineno) for a in item.args)
                nm_col, tx_col = col(reg.src, item.args[0], reg.node.lineno), col(reg.src, item.args[1], reg.node.lineno)
                target = by_name.get(impl) if isinstance(item.args[2], ast.Name) else None
                if target is not None and target.category is None and not target.prefix and (
                        isinstance(target.node, (ast.FunctionDef, ast.ClassDef))
                        or (isinstance(target.node, ast.Assign) and len(target.node.targets) == 1
                            and isinstance(target.node.targets[0], ast.Name))):
                    target.category = cat
                    head = f"@{keeper}.keep("
                    if isinstance(target.node, ast.Assign):
                        tgt = target.node.targets[0].id
                        value_src = seg(target.src, target.node.value, target.node.lineno)
                        head = f"{tgt} = {keeper}.add("
                        width = len(head)
                        target.src = (head + reindent(nm, nm_col, width) + ",\n" + " " * width
                                      + reindent(tx, tx_col, width) + ",\n" + " " * width
                                      + reindent(value_src, col(target.src, target.node.value, target.node.lineno), width) + ")\n")
                    else:
                        width = len(head)
                        target.prefix = (head + reindent(nm, nm_col, width) + ",\n" + " " * width
                                         + reindent(tx, tx_col, width) + ")\n")
                    kept_order[cat].append(target)
                else:
                    head = f"{keeper}.add("
                    width = len(head)
                    src = (head + reindent(nm, nm_col, width) + ",\n" + " " * width + reindent(tx, tx_col, width)
                           + ",\n" + " " * width + reindent(impl, col(reg.src, item.args[2], reg.node.lineno), width) + ")\n")
                    st = Stmt(ast.parse(src).body[0], src, "")
                    st.category = cat
                    kept_order[cat].append(st)
                    extra.append(st)
        # the registration: list(mistakes), list(alternatives)
        reg_lines = reg.src.splitlines(keepends=True)
        for key in ("alternatives", "mistakes"):  # later one first: offsets stay valid
            value = kw.get(key)
            if value is None:
                continue
            a, b = value.lineno - reg.node.lineno, value.end_lineno - reg.node.lineno
            new = (reg_lines[a].encode()[:value.col_offset].decode() + f"list({key})"
                   + reg_lines[b].encode()[value.end_col_offset:].decode())
            reg_lines[a:b + 1] = [new]
        reg.src = "".join(reg_lines)
        reg.used = reg.used - set()  # names in the lists now live beside their code

        everything = [st for st in body if st is not reg] + extra
        # helpers: the earliest category of anything that uses them
        users = {id(st): [u for u in everything + [reg] if u is not st and st.defined & u.used] for st in everything}

        def category(st, seen=()):
            if st.category is not None:
                return st.category
            if id(st) in seen:
                return 9
            cats = [category(u, seen + (id(st),)) for u in users[id(st)]]
            return min(cats) if cats else 1
        for st in everything:
            st.cat_final = category(st)
        primaries = {1: [st for st in everything if st.category == 1],
                     2: [st for st in everything if st.category == 2],
                     3: kept_order[3], 4: kept_order[4]}
        primaries[2].sort(key=lambda st: st.node.lineno if st not in extra else 10**9)
        order = []
        for cat in (1, 2, 3, 4):
            helpers = [st for st in everything if st.category is None and st.cat_final == cat]
            placed = []
            for p in primaries[cat]:
                # helpers this primary needs (transitively), not yet placed, in source order
                need, stack = [], [p]
                while stack:
                    cur = stack.pop()
                    for h in helpers:
                        if h not in need and h not in placed and h.defined & cur.used:
                            need.append(h)
                            stack.append(h)
                need.sort(key=lambda st: st.node.lineno)
                placed += need
                order.append((cat, need + [p]))
            rest = [h for h in helpers if h not in placed]
            if rest:
                order.append((cat, sorted(rest, key=lambda st: st.node.lineno)))
        flat = [(cat, st) for cat, group in order for st in group]
        # statements needed at import time come first
        changed = True
        while changed:
            changed = False
            for i, (cat, st) in enumerate(flat):
                for j in range(i + 1, len(flat)):
                    if flat[j][1].defined & st.now:
                        flat.insert(i, flat.pop(j))
                        changed = True
                        break
                if changed:
                    break
        assert len(flat) == len(everything), (label, len(flat), len(everything))

        # imports
        title, contract = contract_of(notebook, label)
        needed = set()
        for _, st in flat:
            needed |= st.used
        needed |= reg.used
        local = set().union(*[st.defined for _, st in flat]) if flat else set()
        needed -= local
        needed.discard("mistakes")
        needed.discard("alternatives")
        head = [f'"""{label}: {title}.\n\n{contract}\n"""\n' if "\\" not in contract and '"""' not in contract
                else f'r"""{label}: {title}.\n\n{contract}\n"""\n', "from __future__ import annotations\n"]
        import_lines = imports_for(needed - {"Kept"}, import_names, where, mod, label)
        import_lines.append("from .._kit import " + ", ".join(sorted({"Kept"} | {n for n in needed if n in KIT.values()})) + "\n")
        reg_import = [l for l in import_lines if "registry import" in l]
        other = [l for l in import_lines if "registry import" not in l]
        need_reg = {"Alternative", "Mistake", "register"}
        if reg_import:
            names = set(re.search(r"import (.*)", reg_import[0]).group(1).split(", ")) | need_reg
        else:
            names = need_reg
        registry_line = "from ...registry import " + ", ".join(sorted(names)) + "\n"
        std = [l for l in other if l.startswith("import ") or l.startswith("from torch") or l.startswith("from collections")]
        pkg = [l for l in other if l not in std and "._common" not in l and " .ex" not in l and "_kit" not in l]
        local_imports = [l for l in other if "._common" in l or " .ex" in l or "_kit" in l]
        out = head + ["\n"] + group_imports(std) + ["\n"] + sorted(pkg + [registry_line]) + sorted(local_imports)
        out += ["\n", "mistakes = Kept(Mistake)\n", "alternatives = Kept(Alternative)\n"]
        headers = {1: "The reference", 2: "Inputs of the public and hidden checks",
                   3: "Kept mistakes, each with its hint", 4: "Kept alternatives (correct answers in other styles)"}
        last = None
        for cat, st in flat:
            if cat != last:
                out += ["\n\n", f"# {headers[cat]} ".ljust(92, "-") + "\n"]
                last = cat
            out += ["\n\n", st.comments, st.prefix, st.src]
        out += ["\n\n", "# Registration ".ljust(92, "-") + "\n\n", reg.src]
        written[EXERCISES / chapter / f"{mod}.py"] = tidy("".join(out))

    # ---------------------------------------------------------------- _common.py
    needed = set()
    for st in common:
        needed |= st.used
    needed -= set().union(*[st.defined for st in common]) if common else set()
    cdoc = f'"""Helpers shared by the exercises of chapter {int(chapter[2:])} (one copy each)."""\n'
    out = [cdoc, "from __future__ import annotations\n", "\n"]
    ilines = imports_for(needed, import_names, where, "_common", chapter)
    kit = sorted(n for n in needed if n in KIT.values())
    std = [l for l in ilines if l.startswith("import ") or l.startswith("from torch") or l.startswith("from collections")]
    pkg = [l for l in ilines if l not in std]
    out += group_imports(std) + ["\n"] + sorted(pkg) + ([f"from .._kit import {', '.join(kit)}\n"] if kit else [])
    for st in common:
        out += ["\n\n", st.comments, st.src]
    written[EXERCISES / chapter / "_common.py"] = tidy("".join(out))

    # ---------------------------------------------------------------- __init__.py
    init = [f'"""{doc.strip()}\n\nOne module per exercise, its parts in one order: the contract, the reference, the\n'
            "inputs of the checks, the kept mistakes (each with its hint), the kept alternatives,\n"
            "the registration. Helpers shared by the chapter's exercises are in ``_common.py``.\n"
            '"""\n', "from . import (  # noqa: F401  (importing an exercise module registers it)\n"]
    init += [f"    {modules[label]},\n" for label in labels] + [")\n"]
    written[EXERCISES / chapter / "__init__.py"] = "".join(init)
    return written


def group_imports(lines):
    std = sorted(l for l in lines if l.startswith("import ") and "torch" not in l)
    tor = sorted(l for l in lines if l not in std)
    return std + (["\n"] if std and tor else []) + tor


def imports_for(needed, import_names, where, mod, label):
    by_from = {}
    plain = []
    for n in sorted(needed):
        if n in KIT.values():
            continue
        if n in import_names:
            st, alias = import_names[n]
            if isinstance(st.node, ast.Import):
                plain.append(f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "") + "\n")
            else:
                src_mod = "." * st.node.level + (st.node.module or "")
                by_from.setdefault(src_mod, []).append(alias.name + (f" as {alias.asname}" if alias.asname else ""))
        elif n in where:
            if where[n] != mod:
                by_from.setdefault("." + where[n], []).append(n)
        else:
            print(f"  {label}/{mod}: {n} is not defined at module level anywhere", file=sys.stderr)
    out = sorted(set(plain))
    for m, names in by_from.items():
        out.append(f"from {m} import {', '.join(sorted(set(names)))}\n")
    return out


def tidy(text: str) -> str:
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    return text.rstrip("\n") + "\n"


def main():
    written = {}
    for path in sorted(EXERCISES.glob("ch[0-9][0-9].py")):
        print(f"splitting {path.name}")
        written.update(split_chapter(path))
    for path, text in written.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    for path in sorted(EXERCISES.glob("ch[0-9][0-9].py")):
        path.unlink()
    print(f"wrote {len(written)} files")


if __name__ == "__main__":
    main()
