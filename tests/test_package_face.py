"""The package face (`routedvlm/__init__.py`): the public names import from `routedvlm` itself, lazily."""
import subprocess
import sys

FACE = ["RoutedVLM", "VLM", "CollaborativePipeline", "MutualVerification", "load_router", "Router", "train_router",
        "TrainConfig", "run_labelling", "LabelConfig", "RoutedVLMError"]


def test_the_public_names_import_from_the_top_level_package():
    import routedvlm
    from routedvlm.data.labelling import run_labelling
    from routedvlm.errors import RoutedVLMError
    from routedvlm.inference import RoutedVLM
    from routedvlm.training.pipeline import train_router

    assert sorted(FACE) == routedvlm.__all__ and set(FACE) <= set(dir(routedvlm))
    assert routedvlm.RoutedVLM is RoutedVLM and routedvlm.train_router is train_router
    assert routedvlm.run_labelling is run_labelling and routedvlm.RoutedVLMError is RoutedVLMError
    try:
        routedvlm.Nope
    except AttributeError as exc:
        assert str(exc) == "module 'routedvlm' has no attribute 'Nope'"
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_importing_the_face_and_config_stays_light():
    """`import routedvlm` (what `routedvlm --help` pays) and the config classes load no torch, pandas or mlflow."""
    code = ("import sys, routedvlm; routedvlm.TrainConfig; routedvlm.LabelConfig; routedvlm.RoutedVLMError; "
            "print(sorted(m for m in ('torch', 'pandas', 'mlflow', 'lightgbm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
