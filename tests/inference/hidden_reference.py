"""The transformers side's numbers for test_vllm_hidden.py, computed in the project's .venv (vLLM's venv pins an older
transformers than the local side is built for): run as `python hidden_reference.py JOB.json OUT.safetensors`.

JOB: {"rows": [[png path, question], ...], "large": folder, "layers": [...], "max_direct_tokens": n} captures the
large_direct hidden states of each row; with "small" and "router" (a router folder) and "settings" it runs RoutedVLM
on each row instead and records the decision, the answer and the vector the router read.
"""
import json
import sys


def capture(job: dict) -> tuple[dict, dict]:
    from PIL import Image

    from routedvlm.inference import VLM, CollaborativePipeline

    vlm = VLM.from_pretrained(job["large"], device="cpu")
    vlm.capture_hidden(job["layers"])
    pipe = CollaborativePipeline(vlm, vlm, max_direct_tokens=job["max_direct_tokens"])
    tensors, info = {}, []
    for i, (png, question) in enumerate(job["rows"]):
        result = pipe.run(Image.open(png).convert("RGB"), question, "large_direct")
        h = result.generation.hidden
        for layer in h.layers:
            tensors[f"{i}.prompt_last.{layer}"] = h.prompt_last[layer]
            tensors[f"{i}.answer.{layer}"] = h.answer[layer]
        info.append({"answer": result.answer, "token_ids": list(map(int, result.generation.token_ids))})
    return tensors, {"rows": info}


def route(job: dict) -> tuple[dict, dict]:
    import numpy as np
    from PIL import Image

    from routedvlm.inference import RoutedVLM

    vlm = RoutedVLM.from_pretrained(job["small"], job["large"], job["router"], **job["settings"])
    if vlm.router is None:
        raise SystemExit(f"router not attached: {vlm.router_error}")
    tensors, info = {}, []
    for i, (png, question) in enumerate(job["rows"]):
        out = vlm(image=Image.open(png).convert("RGB"), question=question)
        tensors[f"{i}.read"] = np.asarray(vlm.router.last_input, dtype=np.float32)
        info.append({"strategy": out.decision["strategy"], "answer": out.text, "p_correct": out.p_correct})
    return tensors, {"rows": info}


def main(argv) -> int:
    from safetensors.numpy import save_file

    job = json.loads(open(argv[0]).read())
    tensors, info = (route if job.get("router") else capture)(job)
    save_file(tensors, argv[1], metadata={"info": json.dumps(info)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
