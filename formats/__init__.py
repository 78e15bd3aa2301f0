"""File formats and block codecs: the type registry, GGUF, safetensors, the bundle.

Imports nothing else of panelpack's (see ARCHITECTURE in docs/).
"""
