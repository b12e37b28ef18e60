"""Exercise modules, one per chapter. Importing this package registers every exercise."""
import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module.startswith("ch"):
        importlib.import_module(f"{__name__}.{_module}")
