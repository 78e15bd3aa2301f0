"""The reference runtime: standard dispatch, SME2/NEON emulation, kernels, agreement checks."""
