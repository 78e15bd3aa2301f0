"""The reference runtime: standard dispatch, SME2/NEON emulation, kernels, agreement checks."""


def eval(bundle, **options):  # noqa: A001 - the API name the runtime is asked for
    """Run a text through ``bundle`` and compare it with a reference run
    (:func:`panelpack.verify.runtime.evaluate.evaluate`; returns an ``EvalReport``)."""
    from .runtime.evaluate import evaluate

    return evaluate(bundle, **options)


def generate(bundle, prompt, n: int = 32, temp: float = 0.0, seed: int = 0, kernels: str = "compiled") -> str:
    """Continue ``prompt`` (text) with ``bundle``'s own kernels; the new text."""
    from .runtime import Model

    m = Model.open(bundle, kernels)
    try:
        return m.tokenizer.decode(list(m.generate(prompt, n, temp=temp, seed=seed)))
    finally:
        m.close()


def __getattr__(name):
    if name == "Model":
        from .runtime import Model

        return Model
    raise AttributeError(name)
