"""Read the Python source of a package pinned in requirements.txt without importing it.

unsloth and vllm cannot be imported on a CPU-only machine (unsloth switches to a CPU backend without the
vLLM path; vllm needs CUDA), but the contract tests still need to know which keyword arguments the pinned
versions accept. This module:

1. reads the pin from requirements.txt (``pinned_version("vllm")``);
2. downloads ONE small artifact of exactly that version from the package index into
   ``~/.cache/grpo-kit/pinned-source/`` (override with GRPO_KIT_PINNED_SOURCE), verifying its sha256 against
   the index, and reusing it on later runs:
   - a ``py3-none-any`` wheel when one exists (unsloth ~29 MB, unsloth_zoo ~3 MB);
   - otherwise the sdist (vllm: ~31 MB ``.tar.gz`` instead of a 300+ MB binary wheel). Nothing is built:
     the archive is only unpacked;
3. extracts only the ``*.py`` files and ``PKG-INFO``/``METADATA``;
4. parses them with ``ast`` (``function_signature``, ``class_fields``, ``kwargs_consumed``...).

A download failure raises PinnedSourceError with the URL and the reason; the tests turn that into a failure,
never a skip (CI has registry access, so a missing artifact is a real problem).

Index: $PIP_INDEX_URL if set, else https://pypi.org/simple (PEP 503 HTML pages).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import html.parser
import os
import re
import shutil
import ssl
import tarfile
import time
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO_ROOT / "requirements.txt"
DEFAULT_INDEX = "https://pypi.org/simple"
DOWNLOAD_TIMEOUT_S = 300


class PinnedSourceError(RuntimeError):
    """The pinned source could not be obtained or does not have the expected shape."""


def cache_root() -> Path:
    override = os.environ.get("GRPO_KIT_PINNED_SOURCE")
    root = Path(override) if override else Path.home() / ".cache" / "grpo-kit" / "pinned-source"
    root.mkdir(parents=True, exist_ok=True)
    return root


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ------------------------------------------------------------------------------------------ requirements.txt


def pinned_versions(path: Path = REQUIREMENTS) -> dict[str, str]:
    """{canonical name: version} for every ``name==version`` line (comments, markers and extras ignored)."""
    if not path.exists():
        raise PinnedSourceError(f"{path} does not exist")
    pins: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        line = line.split(";", 1)[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([A-Za-z0-9.+!_-]+)", line)
        if not m:
            raise PinnedSourceError(f"{path.name}: not an exact '==' pin: {raw!r}")
        pins[canonical(m.group(1))] = m.group(3)
    return pins


def pinned_version(name: str, path: Path = REQUIREMENTS) -> str:
    pins = pinned_versions(path)
    try:
        return pins[canonical(name)]
    except KeyError:
        raise PinnedSourceError(f"{name} is not pinned with '==' in {path.name}") from None


# ----------------------------------------------------------------------------------------------- download


@dataclass(frozen=True)
class Link:
    filename: str
    url: str
    sha256: str | None


class _LinkParser(html.parser.HTMLParser):
    def __init__(self, base: str):
        super().__init__()
        self.base = base
        self.links: list[Link] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")
            self._text = []

    def handle_data(self, data):
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._href is not None:
            url, _, frag = urllib.parse.urljoin(self.base, self._href).partition("#")
            sha = frag[len("sha256="):] if frag.startswith("sha256=") else None
            name = "".join(self._text).strip() or url.rsplit("/", 1)[-1]
            self.links.append(Link(name, url, sha))
            self._href = None


def _ssl_context() -> ssl.SSLContext:
    cafile = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or os.environ.get("REQUESTS_CA_BUNDLE")
    if cafile and Path(cafile).exists():
        return ssl.create_default_context(cafile=cafile)
    return ssl.create_default_context()


def _get(url: str) -> bytes:
    req = urllib.request.Request(url, headers={"User-Agent": "grpo-kit-contract-tests", "Accept": "text/html"})
    try:
        with urllib.request.urlopen(req, timeout=DOWNLOAD_TIMEOUT_S, context=_ssl_context()) as resp:
            return resp.read()
    except Exception as err:  # noqa: BLE001 - re-raised with the URL, which is what a reader needs
        raise PinnedSourceError(f"download failed: {url}: {type(err).__name__}: {err}") from err


def index_links(name: str) -> list[Link]:
    index = os.environ.get("PIP_INDEX_URL", DEFAULT_INDEX).rstrip("/")
    page_url = f"{index}/{canonical(name)}/"
    parser = _LinkParser(page_url)
    parser.feed(_get(page_url).decode("utf-8", "replace"))
    return parser.links


def choose_artifact(name: str, version: str, links: list[Link]) -> Link:
    """The pure-Python wheel of that exact version if there is one, else its sdist. Never a binary wheel."""
    stem = re.sub(r"[-_.]+", "_", name).lower()
    wheels, sdists = [], []
    for link in links:
        fn = link.filename
        low = fn.lower()
        if low.endswith(".whl"):
            parts = fn[:-4].split("-")
            if len(parts) >= 5 and re.sub(r"[-_.]+", "_", parts[0]).lower() == stem and parts[1] == version:
                if parts[-1] == "any" and parts[-2] == "none":
                    wheels.append(link)
        elif low.endswith((".tar.gz", ".zip")):
            base = fn[: -len(".tar.gz")] if low.endswith(".tar.gz") else fn[:-4]
            dist, _, ver = base.rpartition("-")
            if re.sub(r"[-_.]+", "_", dist).lower() == stem and ver == version:
                sdists.append(link)
    if wheels:
        return wheels[0]
    if sdists:
        return sdists[0]
    raise PinnedSourceError(
        f"no pure-Python wheel or sdist of {name}=={version} on the index "
        f"({len(links)} files listed); is the pin in requirements.txt a real release?"
    )


@dataclass
class FetchResult:
    path: Path
    downloaded: bool
    seconds: float
    size: int


def fetch_artifact(name: str, version: str) -> FetchResult:
    """Download (or reuse) the chosen artifact under cache_root()/<name>-<version>/."""
    folder = cache_root() / f"{canonical(name)}-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    existing = [p for p in folder.iterdir() if p.is_file() and p.name.endswith((".whl", ".tar.gz", ".zip"))]
    if existing:
        return FetchResult(existing[0], False, 0.0, existing[0].stat().st_size)
    start = time.monotonic()
    link = choose_artifact(name, version, index_links(name))
    data = _get(link.url)
    if link.sha256 and hashlib.sha256(data).hexdigest() != link.sha256:
        raise PinnedSourceError(f"sha256 mismatch for {link.url}")
    tmp = folder / (link.filename + ".part")
    tmp.write_bytes(data)
    tmp.replace(folder / link.filename)
    return FetchResult(folder / link.filename, True, time.monotonic() - start, len(data))


def source_root(name: str, version: str | None = None) -> Path:
    """Folder holding the unpacked ``*.py`` files (and metadata) of name==version (default: the pin)."""
    version = version or pinned_version(name)
    art = fetch_artifact(name, version)
    out = art.path.parent / "src"
    done = out / ".complete"
    if done.exists():
        return out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    wanted = re.compile(r"(\.py|/PKG-INFO|\.dist-info/METADATA)$")
    fn = art.path.name
    try:
        if fn.endswith((".whl", ".zip")):
            with zipfile.ZipFile(art.path) as zf:
                for member in zf.namelist():
                    if wanted.search("/" + member):
                        _write_member(out, member, zf.read(member))
        else:
            with tarfile.open(art.path, "r:gz") as tf:
                for member in tf:
                    if member.isfile() and wanted.search("/" + member.name):
                        # sdists have one top folder (vllm-0.19.1/); drop it so paths start at the package
                        rel = member.name.split("/", 1)[1] if "/" in member.name else member.name
                        _write_member(out, rel, tf.extractfile(member).read())
    except (zipfile.BadZipFile, tarfile.TarError, OSError) as err:
        shutil.rmtree(art.path.parent, ignore_errors=True)  # a truncated download must not be reused
        raise PinnedSourceError(f"could not unpack {art.path}: {err}") from err
    done.write_text(fn)
    return out


def _write_member(out: Path, rel: str, data: bytes) -> None:
    target = (out / rel).resolve()
    if not str(target).startswith(str(out.resolve())):
        raise PinnedSourceError(f"refusing archive member outside the cache: {rel}")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def metadata_requires(name: str, version: str | None = None) -> list[str]:
    """Requires-Dist lines from the artifact's METADATA / PKG-INFO."""
    root = source_root(name, version)
    for cand in list(root.glob("*.dist-info/METADATA")) + [root / "PKG-INFO"]:
        if cand.exists():
            return [line.split(":", 1)[1].strip() for line in cand.read_text(errors="replace").splitlines()
                    if line.startswith("Requires-Dist:")]
    raise PinnedSourceError(f"no METADATA/PKG-INFO in {root}")


# ----------------------------------------------------------------------------------------------------- ast


@functools.lru_cache(maxsize=None)
def parse(name: str, relpath: str, version: str | None = None) -> ast.Module:
    path = source_root(name, version) / relpath
    if not path.exists():
        raise PinnedSourceError(f"{name}=={version or pinned_version(name)} has no {relpath}")
    return ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))


def find_class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise PinnedSourceError(f"class {name} not found at module level")


def find_function(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """``func`` or ``Class.method`` (module level / class body only)."""
    parts = qualname.split(".")
    body = tree.body
    if len(parts) == 2:
        body = find_class(tree, parts[0]).body
    elif len(parts) != 1:
        raise ValueError(qualname)
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == parts[-1]:
            return node
    raise PinnedSourceError(f"function {qualname} not found")


@dataclass(frozen=True)
class Signature:
    names: tuple[str, ...]  # parameters that can be passed by keyword
    var_kwargs: str | None  # name of the **kwargs parameter, if any
    var_args: str | None


def signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Signature:
    a = fn.args
    names = [p.arg for p in a.args + a.kwonlyargs]  # posonlyargs cannot be passed by keyword
    return Signature(tuple(names), a.kwarg.arg if a.kwarg else None, a.vararg.arg if a.vararg else None)


def kwargs_consumed(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Keys read by name from the function's ``**kwargs`` dict anywhere in its body.

    Counted: ``kwargs.get("k")``, ``kwargs.pop("k")``, ``kwargs.setdefault("k")``, ``kwargs["k"]``,
    ``"k" in kwargs``. (String literals elsewhere are reported separately by ``string_literals``.)
    """
    kw = fn.args.kwarg.arg if fn.args.kwarg else None
    if kw is None:
        return set()
    found: set[str] = set()
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == kw
                and node.func.attr in {"get", "pop", "setdefault"} and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
        elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == kw
              and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            found.add(node.slice.value)
        elif (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn))
              and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)
              and isinstance(node.comparators[0], ast.Name) and node.comparators[0].id == kw):
            found.add(node.left.value)
    return found


def string_literals(fn: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(fn) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def class_fields(cls: ast.ClassDef) -> list[str]:
    """Annotated class-body fields of a dataclass / msgspec.Struct / pydantic model (ClassVar excluded)."""
    out = []
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "ClassVar" in ast.unparse(node.annotation):
                continue
            out.append(node.target.id)
    return out


@functools.lru_cache(maxsize=None)
def _parse_file(path: Path, mtime: float) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return None


def attribute_assignments(root: Path, attr: str) -> list[str]:
    """'file:line' for every ``<expr>.attr = ...`` or ``setattr(x, "attr", ...)`` under root."""
    hits = []
    for path in sorted(root.rglob("*.py")):
        if attr not in path.read_text(encoding="utf-8", errors="replace"):
            continue  # cheap pre-filter: most files never mention the name
        tree = _parse_file(path, path.stat().st_mtime)
        if tree is None:
            continue
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == attr for t in targets):
                hits.append(f"{path.relative_to(root)}:{node.lineno}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                  and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == attr):
                hits.append(f"{path.relative_to(root)}:{node.lineno}")
    return hits


# ----------------------------------------------------------------------------------------- the kwargs rule


@dataclass(frozen=True)
class Target:
    """One function of a pinned package: (package, file inside the artifact, Class.method)."""

    package: str
    relpath: str
    qualname: str

    def node(self):
        return find_function(parse(self.package, self.relpath), self.qualname)

    def __str__(self):
        return f"{self.package}=={pinned_version(self.package)} {self.relpath}::{self.qualname}"


def unknown_kwargs(keys, chain: list[Target]) -> dict[str, str]:
    """{key: why} for every key that no function in the delegation chain accepts.

    The rule, applied to each function of ``chain`` in order (chain[i] forwards its **kwargs to chain[i+1]):
    - a named parameter (not positional-only) accepts the key;
    - otherwise, if the function has **kwargs, the key is accepted only when the body reads it by name
      (kwargs.get/pop/setdefault("key"), kwargs["key"], "key" in kwargs); an unread key in **kwargs is NOT
      accepted just because **kwargs exists - that is exactly how a renamed argument goes unnoticed;
    - an unread key is passed on to the next function of the chain (the caller declares the delegation);
    - the last function must accept it by one of the two rules above.
    """
    problems = {}
    for key in keys:
        why = []
        for target in chain:
            fn = target.node()
            sig = signature(fn)
            if key in sig.names or key in kwargs_consumed(fn):
                break
            why.append(f"{target}: no parameter '{key}'"
                       + (f", and **{sig.var_kwargs} never reads it by name" if sig.var_kwargs else ""))
            if not sig.var_kwargs:
                break
        else:
            problems[key] = "; ".join(why)
            continue
        if why and key not in signature(fn).names and key not in kwargs_consumed(fn):
            problems[key] = "; ".join(why)
    return problems


# ------------------------------------------------------------------------------ version branches on another package

_VERSION_CALLS = {"Version", "TrueVersion", "parse", "parse_version"}
_COMPARE = {ast.Lt: "__lt__", ast.LtE: "__le__", ast.Gt: "__gt__", ast.GtE: "__ge__", ast.Eq: "__eq__",
            ast.NotEq: "__ne__"}


@dataclass(frozen=True)
class VersionCheck:
    """One comparison of another package's version found in a pinned package's source.

    ``operands`` is the comparison chain with the subject (the other package's version) as None and each bound as
    its version string, or the whole operand's text where a bound could not be resolved to a constant."""

    relpath: str
    line: int
    function: str  # enclosing function (``Class.method``) or ``<module>``
    text: str
    operands: tuple[str | None, ...]
    ops: tuple[str, ...]
    at_least: tuple[int, int] | None = None  # a ``helper(major, minor)`` check instead of a comparison

    @property
    def key(self) -> str:
        """Stable across line moves: file, function and the comparison as written."""
        return f"{self.relpath}::{self.function}: {self.text}"

    @property
    def resolved(self) -> bool:
        return self.at_least is not None or all(o is None or _is_version(o) for o in self.operands)

    def holds(self, version: str) -> bool | None:
        """Whether the comparison is true when the subject is ``version``; None where a bound is not a constant."""
        from packaging.version import Version

        v = Version(version)
        if self.at_least is not None:
            return (v.major, v.minor) >= self.at_least
        if not self.resolved:
            return None
        values = [v if o is None else Version(o) for o in self.operands]
        return all(getattr(values[i], op)(values[i + 1]) for i, op in enumerate(self.ops))


def _is_version(text: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def _string_constants(body) -> dict[str, str]:
    """name -> string for ``NAME = "..."`` statements directly in body."""
    out = {}
    for node in body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node.value.value
    return out


def _assigned_values(fn: ast.AST) -> dict[str, list[ast.AST]]:
    """name -> every value assigned to it anywhere inside fn (nested blocks included)."""
    out: dict[str, list[ast.AST]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append(node.value)
    return out


def version_checks(root: Path, subject: str, helpers: tuple[str, ...] = ()) -> list[VersionCheck]:
    """Every comparison of ``subject``'s version (e.g. "vllm") in the ``*.py`` files under root.

    Found: ``Version(X) < Version("0.11.0")`` and chains of them (``Version``/``TrueVersion``/``parse``), where X
    mentions the subject by name (``vllm_version``, ``vllm.__version__``, ``importlib_version("vllm")``) or is a
    local name assigned from such an expression; a bound may be a literal or a string constant of the function or
    module. ``helpers`` names functions called as ``helper(major, minor)`` meaning "subject >= major.minor"."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if subject not in text.lower():
            continue
        tree = _parse_file(path, path.stat().st_mtime)
        if tree is None:
            continue
        rel = str(path.relative_to(root))
        module_consts = _string_constants(tree.body)
        scopes: list[tuple[str, ast.AST]] = [("<module>", tree)]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scopes.append((node.name, node))
            elif isinstance(node, ast.ClassDef):
                scopes += [(f"{node.name}.{m.name}", m) for m in node.body
                           if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
        owner: dict[int, tuple[str, ast.AST]] = {}
        for name, scope in scopes:  # functions after <module>, so the innermost listed scope wins
            for node in ast.walk(scope):
                owner[id(node)] = (name, scope)
        scope_names: dict[int, tuple[dict, dict]] = {}  # id(scope) -> (assigned values, string constants)
        for node in ast.walk(tree):
            name, scope = owner.get(id(node), ("<module>", tree))
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers
                    and len(node.args) == 2 and all(isinstance(a, ast.Constant) for a in node.args)):
                found.append(VersionCheck(rel, node.lineno, name, ast.unparse(node), (), (),
                                          (node.args[0].value, node.args[1].value)))
                continue
            if not isinstance(node, ast.Compare) or not all(type(op) in _COMPARE for op in node.ops):
                continue
            if id(scope) not in scope_names:
                scope_names[id(scope)] = ((_assigned_values(scope), {**module_consts, **_string_constants(ast.walk(scope))})
                                          if scope is not tree else ({}, module_consts))
            local, consts = scope_names[id(scope)]
            operands, is_subject, has_bound = [], False, False
            for operand in [node.left, *node.comparators]:
                kind, value = _classify_operand(operand, subject, local, consts)
                is_subject |= kind == "subject"
                has_bound |= kind == "bound"
                operands.append(None if kind == "subject" else value)
            if is_subject and (has_bound or not all(o is None for o in operands)) and any(
                    isinstance(o, ast.Call) and _call_name(o) in _VERSION_CALLS
                    for o in [node.left, *node.comparators]):
                found.append(VersionCheck(rel, node.lineno, name, ast.unparse(node), tuple(operands),
                                          tuple(_COMPARE[type(op)] for op in node.ops)))
    return found


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _mentions(node: ast.AST, subject: str, local: dict[str, list[ast.AST]], depth: int = 0) -> bool:
    if subject in ast.unparse(node).lower():
        return True
    if depth < 2 and isinstance(node, ast.Name):
        return any(_mentions(v, subject, local, depth + 1) for v in local.get(node.id, []))
    return False


def _classify_operand(node, subject, local, consts) -> tuple[str, str | None]:
    """("subject", None) | ("bound", "0.11.0") | ("other", text)."""
    inner = node.args[0] if (isinstance(node, ast.Call) and _call_name(node) in _VERSION_CALLS
                             and len(node.args) == 1) else node
    if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
        return "bound", inner.value
    if isinstance(inner, ast.Name) and _is_version(consts.get(inner.id, "")):
        return "bound", consts[inner.id]  # a named bound (VLLM_PDL_FIX_VERSION = "0.15.0") before its name's text
    if _mentions(inner, subject, local):
        return "subject", None
    return "other", ast.unparse(node)


def pinned_functions(name: str, relpath: str, functions: set[str], namespace: dict) -> dict:
    """Run the pinned source's own module-level ``def``s of ``functions`` into namespace (which supplies what they
    read: modules, stubs) and return it: the pinned arithmetic itself, without importing its package."""
    tree = parse(name, relpath)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in functions]
    missing = functions - {d.name for d in defs}
    if missing:
        raise PinnedSourceError(f"{name}=={pinned_version(name)} {relpath} has no module-level {sorted(missing)}")
    exec(compile(ast.Module(body=defs, type_ignores=[]), f"{name}/{relpath}", "exec"), namespace)  # noqa: S102
    return namespace
