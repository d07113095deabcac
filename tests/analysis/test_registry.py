"""gcpo_analysis.registry.Registry, the shape the measures, modulators and datasets share:
registration by decorator in order, a name registered twice refused, an unknown name refused with
the choices; and the three registries are Registries."""

import pytest

from gcpo_analysis.datasets import DATASET_REGISTRY
from gcpo_analysis.measures.modulators import MODULATORS
from gcpo_analysis.measures.registry import MEASURE_REGISTRY
from gcpo_analysis.registry import Registry


def test_register_look_up_refuse_and_replace():
    reg: Registry[tuple] = Registry("widget")

    def f():
        return 1

    assert reg.decorator("b", lambda fn: ("b", fn))(f) is f  # the function comes back unchanged
    reg.decorator("a", lambda fn: ("a", fn))(f)  # one function, two names
    assert reg.names() == ("b", "a") and list(reg) == ["b", "a"]  # registration order, not sorted
    assert reg.lookup("a") == ("a", f)
    with pytest.raises(ValueError, match=r"unknown widget 'c'; choices: b, a$"):
        reg.lookup("c")
    with pytest.raises(ValueError, match="widget 'a' is registered already"):
        reg.add("a", ("other", f))
    assert reg["a"] == ("a", f)  # the refused one left the first in place
    reg.pop("a")
    reg.add("a", ("new", f))
    assert reg.lookup("a") == ("new", f) and reg.names() == ("b", "a")


@pytest.mark.parametrize(
    "registry, kind", [(MEASURE_REGISTRY, "measure"), (MODULATORS, "modulator"), (DATASET_REGISTRY, "dataset")]
)
def test_the_three_extension_points_share_it(registry, kind):
    assert isinstance(registry, Registry) and registry.kind == kind and len(registry) > 1
    first = next(iter(registry))
    with pytest.raises(ValueError, match=f"{kind} '{first}' is registered already"):
        registry.decorator(first, lambda fn: fn)(lambda: None)
    with pytest.raises(ValueError, match=f"unknown {kind} 'nope'; choices: {first}, "):
        registry.lookup("nope")
