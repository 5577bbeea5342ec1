"""The toy task's functions (routedvlm_toy.yaml): the sample's image, its question, and exact match of the answer."""
from PIL import Image


def doc_to_visual(doc):
    with Image.open(doc["image"]) as img:
        return [img.convert("RGB")]


def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    return doc["question"]


def process_results(doc, results):
    return {"exact_match": float(results[0].strip().lower() == doc["answer"].strip().lower())}
