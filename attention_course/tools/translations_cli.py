"""``attention-course translations update|check|export|import``: the translators' command
(:mod:`.translations` for the prose, :mod:`.package_strings` for the package's own strings)."""
from __future__ import annotations

from pathlib import Path

from .package_strings import package_catalog_path, package_problems, update_package
from .translations import (LANGUAGES, catalog_path, export, glossary_problems, import_translations, problems,
                           update)

def add_command(sub) -> None:
    """``attention-course translations update|check|export|import``."""
    parser = sub.add_parser("translations", help="translators: keep the catalogs under locales/ in step "
                                                  "with the English source")
    parser.add_argument("action", choices=["update", "check", "export", "import"])
    parser.add_argument("--lang", default="zh", choices=LANGUAGES)
    parser.add_argument("--root", default=".", help="the course folder (default: the current one)")
    parser.add_argument("--domain", action="append", help="one catalog (by name, e.g. 03_scoring_functions); "
                                                          "repeat for more; default: all")
    parser.add_argument("--file", help="export: write here (default: print); import: the translator's file")
    parser.add_argument("--all", action="store_true", help="export every entry, not only those to translate")
    parser.add_argument("--where", action="append", default=[],
                        help="export: only entries from here (a location's start, e.g. ch05 or checks/)")
    parser.set_defaults(func=run_command)


def run_command(args) -> int:
    root = Path(args.root)
    if args.action == "update":
        report = update(root, args.lang, args.domain)
        report["package"] = update_package(args.lang)
        for domain, numbers in report.items():
            print(f"{domain}: " + ", ".join(f"{v} {k}" for k, v in numbers.items()))
        return 0
    if args.action == "check":
        found = problems(root, args.lang) + glossary_problems(root, args.lang, args.domain) + \
            package_problems(args.lang)
        for line in found:
            print(line)
        print(f"{len(found)} problem(s) in the {args.lang} translations")
        return 1 if found else 0
    if not args.domain or len(args.domain) != 1:
        raise SystemExit(f"translations {args.action}: name one catalog with --domain")
    path = catalog_path(root, args.lang, args.domain[0])
    if args.domain[0] == "package":
        path = package_catalog_path(args.lang)
    if args.action == "export":
        text = export(path, only_missing=not args.all, where_prefixes=tuple(args.where))
        if args.file:
            Path(args.file).write_text(text, encoding="utf-8")
        else:
            print(text)
        return 0
    if not args.file:
        raise SystemExit("translations import: name the translator's file with --file")
    filled, issues = import_translations(path, Path(args.file).read_text(encoding="utf-8"))
    for line in issues:
        print(line)
    print(f"{filled} entries filled in {path}; {len(issues)} refused")
    return 1 if issues else 0
