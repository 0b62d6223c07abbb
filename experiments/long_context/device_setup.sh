# Make a lent GPU machine (experiments/kernels/log.md, "GPU verification") run the zoo: source it from the
# repository root there at the start of EVERY call. Each call copies the working tree afresh, which
# removes the zoo/kernels link made here, while /tmp/site stays on a machine kept warm.
#
# Its image has torch, Triton, Lightning, torchmetrics, safetensors, tokenizers and huggingface_hub
# 1.x, but no jsonargparse, entmax, jsonschema or datasets, and no network. Keep its
# huggingface_hub: its transformers, which torchmetrics imports, refuses 2.x, and nothing the zoo
# runs there needs 2.x. So the missing wheels travel in .whl/ and the data in .gpudata/ (add
# /.whl/ and /.gpudata/ to .git/info/exclude; name both in the device tool's `carry`).
# Fetch the wheels once, here:
#
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl jsonargparse==4.53.0 docstring_parser==0.18.0 \
#     typeshed_client==2.15.0 entmax==1.3 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
#     referencing==0.37.0 rpds-py==2026.9.1 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \
#     httpx2==2.16.2 httpcore2==2.16.2 truststore
#   mkdir -p .gpudata && cp -r $ZOO_DATA_DIR/{pg19mini,enwik8,SHA256SUMS} .gpudata/
#
# The working tree that travels has a size limit (64 MiB) that the published safetensors alone
# exceed: leave them out of the index for the call (`git rm -q --cached
# checkpoints/*/model.safetensors`, and the same pattern in .git/info/exclude; `git reset -q` and
# remove that line afterwards). Measured 2026-11-27 on an H200: setup 15 s, then
# experiments/long_context/device_run.py trains and measures a 25M model at 8,192 in about 3 minutes.
rm -rf /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site $(ls .whl/*.whl | grep -v huggingface_hub) || return 1
ln -sfn ../kernels zoo/kernels   # the package-dir mapping of pyproject.toml, without installing
export PYTHONPATH="$PWD:/tmp/site" ZOO_DATA_DIR="$PWD/.gpudata" PYTHONUNBUFFERED=1
python3 -c "import zoo.cli, zoo.data, zoo.kernels, jsonargparse, entmax, jsonschema" || return 1
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
