# -*- Python -*-
import os
import shutil
import subprocess

import lit.formats
from lit.llvm import llvm_config

config.name = "PipeForge"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.pipeforge_obj_root, "test")

config.substitutions.append(("%examples", os.path.join(config.pipeforge_src_root, "examples")))
config.substitutions.append(("%srcroot", config.pipeforge_src_root))
config.substitutions.append(("%pftools", config.pipeforge_tools_dir))
config.substitutions.append(("%pfbuild", config.pipeforge_obj_root))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.pipeforge_tools_dir, append_path=True)

tools = ["pipeforge-opt", "pipeforge-translate", "pipeforge-sched", "pipeforge-import", "pipeforge-plan",
         "pipeforge-compile", "pipeforge-run"]
llvm_config.add_tool_substitutions(
    [t for t in tools if os.path.exists(os.path.join(config.pipeforge_tools_dir, t))],
    [config.pipeforge_tools_dir])

# GPU tests: `REQUIRES: cuda` runs them only where the CUDA backend is built
# and a GPU answers; elsewhere they are reported as unsupported, not failed.
def _gpu_present():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        return subprocess.run([smi, "-L"], capture_output=True, timeout=10).returncode == 0
    except Exception:
        return False

# `REQUIRES: cuda-build`: the CUDA backend is built (no GPU needed).
if config.pipeforge_cuda_enabled:
    config.available_features.add("cuda-build")
if config.pipeforge_cuda_enabled and _gpu_present():
    config.available_features.add("cuda")

# `REQUIRES: torch`: PyTorch as an independent reference, run by
# %torch_python: $PIPEFORGE_TORCH_PYTHON, else the venv of
# scripts/setup-torch.sh (${PIPEFORGE_TORCH_VENV:-~/.cache/pipeforge/
# torch-venv}/bin/python), else /usr/bin/python3 (Debian's python3-torch).
# Without one the tests are reported unsupported, with a note saying so.
def _torch_python():
    venv = os.environ.get("PIPEFORGE_TORCH_VENV") or os.path.join(
        os.path.expanduser("~"), ".cache", "pipeforge", "torch-venv")
    candidates = [os.environ.get("PIPEFORGE_TORCH_PYTHON"),
                  os.path.join(venv, "bin", "python"), "/usr/bin/python3"]
    for py in candidates:
        if not py or not os.path.exists(py):
            continue
        try:
            if subprocess.run([py, "-c", "import torch"], capture_output=True,
                              timeout=120).returncode == 0:
                return py
        except Exception:
            pass
    return None

_torch_py = _torch_python()
if _torch_py:
    config.available_features.add("torch")
    config.substitutions.append(("%torch_python", _torch_py))
else:
    config.substitutions.append(("%torch_python", "false"))
    lit_config.note("PyTorch not found: the tests that compare with PyTorch "
                    "(REQUIRES: torch) are skipped; run `bash "
                    "scripts/setup-torch.sh` (or set PIPEFORGE_TORCH_PYTHON) "
                    "to enable them")

# `REQUIRES: transformers`: the Hugging Face packages beside that PyTorch
# (transformers, safetensors, tokenizers, sentencepiece; megatron-core for
# the Megatron-LM dataset tests: `REQUIRES: megatron`), the judges of the
# interchange with the Hugging Face ecosystem (docs/huggingface.md).
def _has_modules(py, mods):
    try:
        return subprocess.run([py, "-c", "import " + ", ".join(mods)],
                              capture_output=True, timeout=300).returncode == 0
    except Exception:
        return False

if _torch_py and _has_modules(_torch_py, ["transformers", "safetensors",
                                          "tokenizers", "sentencepiece"]):
    config.available_features.add("transformers")
elif _torch_py:
    lit_config.note("transformers not found beside PyTorch: the tests that "
                    "Hugging Face judges (REQUIRES: transformers) are "
                    "skipped; run `bash scripts/setup-torch.sh`")
# test/Docs/commands.test runs docs/huggingface.md's walk where transformers
# imports.
config.substitutions.append(
    ("%doctransformers", "--transformers " + _torch_py
     if "transformers" in config.available_features else ""))
if _torch_py and _has_modules(_torch_py, ["megatron.core"]):
    config.available_features.add("megatron")

# `REQUIRES: netns`: root may create network namespaces (the multi-host
# test builds its hosts from them); probed by creating and deleting one.
def _netns_allowed():
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        return False
    name = "pfprobe%d" % os.getpid()
    try:
        if subprocess.run(["ip", "netns", "add", name], capture_output=True,
                          timeout=30).returncode != 0:
            return False
        subprocess.run(["ip", "netns", "del", name], capture_output=True,
                       timeout=30)
        return True
    except Exception:
        return False

if _netns_allowed():
    config.available_features.add("netns")

# MPI tests: `REQUIRES: mpi`.
if shutil.which("mpirun"):
    config.available_features.add("mpi")
    config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    config.environment["OMPI_MCA_rmaps_base_oversubscribe"] = "1"

# test/Docs/commands.test runs the docs' GPU blocks only where a GPU answers.
config.substitutions.append(("%docgpu", "--gpu" if "cuda" in config.available_features else ""))
