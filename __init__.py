"""panelpack: offline conversion and weight repacking of quantized LLM checkpoints.

Subpackages: ``panelpack.formats`` (type registry, codecs, GGUF/safetensors/bundle files),
``panelpack.repack`` (layouts), ``panelpack.verify`` (reference runtime and agreement checks),
``panelpack.convert`` (the pipeline). Importing ``panelpack`` itself is cheap: nothing heavy
(numba kernels) is loaded until a subpackage that needs it is imported.
"""

__version__ = "0.1.0"
