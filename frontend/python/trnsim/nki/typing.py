"""``nki.typing`` / ``neuronxcc.nki.typing``: the annotations kernels use (``nt.tensor``,
``nt.mutable_tensor``, ``nt.scalar``); they do not change how a kernel traces."""


class _Annotation:
    def __init__(self, name):
        self._name = name

    def __getitem__(self, item):
        return self

    def __call__(self, *args, **kwargs):
        return self

    def __repr__(self):
        return f"nt.{self._name}"


tensor = _Annotation("tensor")
mutable_tensor = _Annotation("mutable_tensor")
scalar = _Annotation("scalar")
