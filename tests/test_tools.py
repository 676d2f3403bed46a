"""tools/README.md lists every asset builder and benchmark script (tools/assets/, tools/bench/) and names no script
that is not there; the benchmark scripts state their command in their own help text."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("assets", "bench")


def _scripts() -> set[str]:
    return {f"{folder}/{path.name}" for folder in FOLDERS for path in (ROOT / "tools" / folder).iterdir()
            if path.suffix in (".py", ".sh") and path.name != "__init__.py"}


def test_readme_lists_every_tool_script_and_only_those():
    readme = (ROOT / "tools" / "README.md").read_text()
    listed = set()
    for section in re.split(r"^## ", readme, flags=re.M)[1:]:
        folder = section.split("/", 1)[0]
        listed |= {f"{folder}/{name}" for name in re.findall(r"^\| `([\w.]+)` \|", section, flags=re.M)}
    assert listed == _scripts(), f"missing from tools/README.md: {sorted(_scripts() - listed)}; " \
                                 f"listed but absent: {sorted(listed - _scripts())}"


def test_benchmark_scripts_name_their_own_command():
    """Each runnable script in tools/bench shows how it is run (`python tools/bench/X.py` or `bash ...`)."""
    for script in sorted(_scripts()):
        helpers = ("bench/common.sh", "bench/kernel_table.py", "bench/loop_profile.py")  # imported or sourced
        if script.startswith("bench/") and script not in helpers:
            text = (ROOT / "tools" / script).read_text()
            assert f"tools/{script}" in text, f"tools/{script} does not show its command"
