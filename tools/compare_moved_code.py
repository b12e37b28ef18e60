"""Check the move (issue 18): every top-level definition of the old chNN.py modules (at REV)
is in the new packages with the same syntax tree, but for the renamed _kit helpers, the
relative-import depth and the kept-mistake/alternative decorators.

    python tools/compare_moved_code.py REV
"""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from split_exercises import KIT  # noqa: E402


class Normalise(ast.NodeTransformer):
    def visit_Name(self, node):
        node.id = KIT.get(node.id, node.id)
        return node

    def visit_FunctionDef(self, node):
        node.name = KIT.get(node.name, node.name)
        node.decorator_list = [d for d in node.decorator_list
                               if not (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
                                       and getattr(d.func.value, "id", "") in ("mistakes", "alternatives"))]
        self.generic_visit(node)
        return node

    visit_ClassDef = visit_FunctionDef

    def visit_ImportFrom(self, node):
        node.level = 0  # one package deeper by design
        return node


def defs(src):
    out = {}
    for node in ast.parse(src).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            # X = mistakes.add(name, hint, value) -> X = value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                    and getattr(value.func.value, "id", "") in ("mistakes", "alternatives"):
                node.value = value.args[2]
            out[node.targets[0].id] = node
    return out


def main(rev):
    old, new = {}, {}
    for n in range(1, 10):
        src = subprocess.run(["git", "show", f"{rev}:attention_course/exercises/ch0{n}.py"],
                             capture_output=True, text=True, cwd=ROOT).stdout
        old.update({(n, k): v for k, v in defs(src).items()})
        for path in sorted((ROOT / f"attention_course/exercises/ch0{n}").glob("*.py")):
            new.update({(n, k): v for k, v in defs(path.read_text()).items()})
    kit = defs((ROOT / "attention_course/exercises/_kit.py").read_text())
    same = differ = 0
    for key, node in old.items():
        name = KIT.get(key[1], key[1])
        if name in kit and key[1] in KIT:
            continue  # replaced by the one copy in _kit
        other = new.get((key[0], key[1]))
        if other is None:
            print(f"MISSING ch0{key[0]} {key[1]}")
            differ += 1
            continue
        a = ast.dump(Normalise().visit(node))
        b = ast.dump(Normalise().visit(other))
        if a != b:
            print(f"DIFFERS ch0{key[0]} {key[1]}")
            differ += 1
        else:
            same += 1
    print(f"{same} definitions identical, {differ} differ or missing, "
          f"{sum(1 for k in old if k[1] in KIT)} replaced by _kit")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "HEAD"))
