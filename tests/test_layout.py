"""The layout keeps the architecture: the package is a stack of layers (docs/layout.md), each importing only
those below it; the model a checkpoint carries, at the bottom, imports nothing else of the package."""

import ast
import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hf_vanilla"
# What a checkpoint's code may import: the libraries a plain `transformers` install has, and the standard
# library.
MODEL_LIBRARIES = {"torch", "transformers", "huggingface_hub"}


def imported_modules(path: Path) -> set[str]:
    """Every module a file of the package imports."""
    return imports_of(path.read_text(), path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])


def imports_of(source: str, package: tuple[str, ...]) -> set[str]:
    """Every module `source` imports, relative imports resolved against `package`."""
    modules = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            modules.add(".".join((*base, node.module or "")).rstrip("."))
    return modules


# The layers, bottom first: a module may import its own layer and those before it, never one after it. The
# leaves (files, precision, extras) sit with the model at the bottom: they import nothing of the package.
LAYERS = (
    ("model", "files", "precision", "extras"),
    ("data",),
    ("checkpoints",),
    ("translation",),
    ("evaluation",),
    ("training",),
    ("cli",),
    ("tools",),
    ("serving",),
    ("research",),
)
# The package's door: it registers the model with the Auto classes, so it imports the model alone.
DOOR = "hf_vanilla"


def layer_of(module: str) -> int | None:
    """The layer of a module of the package (`hf_vanilla.data.corpus` -> 1); None outside the package."""
    parts = module.split(".")
    if parts[0] != DOOR:
        return None
    if len(parts) == 1:
        return 0
    return next(index for index, rooms in enumerate(LAYERS) if parts[1] in rooms)


def upward_imports(path: Path) -> list[str]:
    """The package modules `path` imports from a layer above its own."""
    own = layer_of(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
    return sorted(m for m in imported_modules(path) if (layer := layer_of(m)) is not None and layer > own)


def test_every_room_of_the_package_has_a_layer():
    rooms = {
        path.stem if path.suffix else path.name for path in PACKAGE.iterdir() if not path.name.startswith("_")
    }
    rooms.discard("__pycache__")
    assert rooms == {room for layer in LAYERS for room in layer}


def test_no_module_imports_a_layer_above_its_own():
    offending = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__init__.py" and path.parent == PACKAGE:
            continue
        if upward := upward_imports(path):
            offending[str(path.relative_to(PACKAGE))] = upward
    assert not offending


def test_the_layer_check_can_fail(tmp_path, monkeypatch):
    """The check itself can fail: data importing training, or the model importing data, is caught."""
    assert layer_of("hf_vanilla.training.train") > layer_of("hf_vanilla.data.corpus")
    data_module = PACKAGE / "data" / "corpus.py"
    monkeypatch.setattr(Path, "read_text", lambda self: "from hf_vanilla.training.train import x\n")
    assert upward_imports(data_module) == ["hf_vanilla.training.train"]
    model_module = PACKAGE / "model" / "hub.py"
    monkeypatch.setattr(Path, "read_text", lambda self: "from ..data.batches import y\n")
    assert upward_imports(model_module) == ["hf_vanilla.data.batches"]


def test_at_most_six_modules_sit_at_the_package_root():
    assert len(list(PACKAGE.glob("*.py"))) <= 6


def model_may_import(module: str) -> bool:
    """Whether a file of the model a checkpoint carries may import `module`: itself, its libraries, the
    stdlib."""
    top = module.split(".")[0]
    return module.startswith("hf_vanilla.model") or top in MODEL_LIBRARIES or top in sys.stdlib_module_names


def test_the_model_imports_only_its_libraries_and_itself():
    for path in (PACKAGE / "model").glob("*.py"):
        offending = sorted(module for module in imported_modules(path) if not model_may_import(module))
        assert not offending, f"{path.name} imports {offending}"


def test_the_model_allowlist_refuses_the_rest_of_the_stack():
    """The check itself can fail: the package outside the model and the training and data libraries are
    refused."""
    refused = ("hf_vanilla.files", "hf_vanilla", "datasets", "accelerate", "sacrebleu", "tokenizers", "yaml")
    assert not any(map(model_may_import, refused))
    assert all(map(model_may_import, ("hf_vanilla.model.hub", "torch.nn", "transformers.utils", "json")))


def test_nothing_outside_research_imports_it():
    for path in PACKAGE.rglob("*.py"):
        if "research" in path.relative_to(PACKAGE).parts:
            continue
        offending = {m for m in imported_modules(path) if m.startswith("hf_vanilla.research")}
        assert not offending, f"{path.relative_to(PACKAGE)} imports {sorted(offending)}"


def test_nothing_outside_serving_imports_it():
    """The service's web stack is an optional extra: the core must import without it."""
    for path in PACKAGE.rglob("*.py"):
        if "serving" in path.relative_to(PACKAGE).parts:
            continue
        offending = {m for m in imported_modules(path) if m.startswith("hf_vanilla.serving")}
        assert not offending, f"{path.relative_to(PACKAGE)} imports {sorted(offending)}"


def test_the_boundary_check_resolves_relative_imports():
    """The check itself can fail: relative and absolute imports of research are both seen from evaluation."""
    source = (
        "from ..research.reranking import x\nfrom .scoring import y\nimport hf_vanilla.research.ensemble\n"
    )
    assert imports_of(source, ("hf_vanilla", "evaluation")) == {
        "hf_vanilla.research.reranking",
        "hf_vanilla.evaluation.scoring",
        "hf_vanilla.research.ensemble",
    }


# An engine asked for by name or type: a comparison with an engine's name, an isinstance of an engine class,
# or a probe for a method. Callers ask for abilities (`hf_vanilla.translation.engines.require`,
# `engine.abilities`).
ENGINE_TESTS = re.compile(
    r"isinstance\([^)]*Engine\b"
    r"|(==|!=|\bin)\s*\(?\s*(TRANSFORMERS|CTRANSLATE2|[\"'](transformers|ctranslate2)[\"'])"
    r"|(TRANSFORMERS|CTRANSLATE2|[\"'](transformers|ctranslate2)[\"'])\s*(==|!=)"
    r"|(hasattr|getattr)\(\s*engine\b"
    r"|\.engine\s*(==|!=)"
)


def engine_tests(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if ENGINE_TESTS.search(line)]


def test_no_engine_is_asked_for_by_name_or_type_outside_the_engines():
    callers = [
        path
        for path in [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "scripts").rglob("*.py")]
        if PACKAGE / "translation" / "engines" not in path.parents
    ]
    offending = {str(path): lines for path in callers if (lines := engine_tests(path.read_text()))}
    assert not offending


def test_the_engine_check_catches_names_types_and_probes():
    caught = [
        'if settings.engine == "ctranslate2":',
        "if not isinstance(engine, TransformersEngine):",
        "if args.engine != TRANSFORMERS:",
        'attention = getattr(engine, "attention", None)',
    ]
    assert engine_tests("\n".join(caught)) == caught
    assert engine_tests('require(engine, ATTENTION, "why")\nif ATTENTION not in engine.abilities:') == []


def test_the_decoding_options_import_no_engine():
    """translation/decoding.py is what engines build on: importing an engine from it would close a circle."""
    imported = imported_modules(PACKAGE / "translation" / "decoding.py")
    assert not any(module.startswith("hf_vanilla.translation.engines") for module in imported)
