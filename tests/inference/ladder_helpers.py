"""A model side written against the `ModelSide` interface alone (no torch, no HTTP) that takes its ladder alias:
tokens are words; it reasons "step1 step2 ..." and answers "<name>:<number of reasoning words it was shown>"."""
from routedvlm.errors import ModeUnavailableError
from routedvlm.inference.sides import ModelSide


class LadderWordSide(ModelSide):
    stateful = False
    device = "words"

    def __init__(self, name, reasoning_words=12, device="words"):
        from routedvlm.inference.prompts import DEFAULT_PROMPTS

        self.name, self.style, self.reasoner, self.prompts, self.reason_prompt = name, "hybrid", None, DEFAULT_PROMPTS, True
        self.words = [f"step{i}" for i in range(1, reasoning_words + 1)]
        self.device = device
        self.calls = []  # (alias, stage) of every call

    def describe(self):
        return {"name": self.name, "dtype": None, "device": self.device, "weights": None}

    def _gen(self, tokens):
        from routedvlm.inference.sides.results import Generation

        return Generation(list(tokens), [-0.5] * len(tokens), 0.1, [float(i) for i in range(len(tokens))], 0.0, 1.0,
                          float(len(tokens)), 8, 0)

    def _answer(self, side, stage, question, cfg):
        from routedvlm.inference.sides.results import record

        self.calls.append((side, stage))
        shown = sum(w.startswith("step") for w in question.split())
        gen = self._gen([f"{self.name}:{shown}"][: cfg.max_direct_tokens])
        return gen, gen.token_ids[0], record(stage, side, self, self.mode_name("direct"), gen)

    def run_direct(self, side, request, cfg, *, cache=None, upcoming=(), inputs=None):
        gen, answer, rec = self._answer(side, f"{side}_direct", request.question, cfg)
        return gen, answer, [rec]

    def run_reasoning(self, side, request, cfg, max_tokens, *, cache=None, upcoming=(), inputs=None):
        from routedvlm.inference.sides.results import ReasoningRun, record

        self.calls.append((side, f"{side}_reason"))
        words = self.words[:max_tokens]
        gen = self._gen(words)
        rec = record(f"{side}_reason", side, self, self.mode_name("reason"), gen, reasoning_tokens=len(words))
        return ReasoningRun(self, side, gen, None, list(range(len(words))), " ".join(words), None, [rec])

    def finish_answer(self, run, cfg):
        run.answer_gen, run.answer, rec = self._answer(run.side, f"{run.side}_reason_answer", run.reasoning_text, cfg)
        run.records.append(rec)
        return run

    def answer_cold(self, side, request, question, stage, cfg):
        return self._answer(side, stage, question, cfg)

    def prefix(self, side, request, cfg):
        owner = self

        class Prefix:
            direct_text = request.question
            prefix_record = {"stage": f"{side}_prefix", "model": side, "vision_ms": 0.0, "prefill_ms": 0.0,
                             "decode_ms": 0.0}

            def __init__(self):
                self.request = request

            def transfer_text(self, reasoning):
                return owner.prompts.transfer_question(request.question, reasoning)

            def answer(self, text, stage, restore_rope=True):
                return owner._answer(side, stage, text, cfg)

            def transfer(self, text):
                gen, answer, rec = self.answer(text, f"{side}_transfer")
                return gen, answer, [dict(self.prefix_record), rec]

            def attention_scores(self, reasoning):
                raise ModeUnavailableError("no attention")

        return Prefix()

    def complete(self, request, mode, *, max_tokens, min_tokens=0, partial=None, check_context=None):
        from routedvlm.inference.pipeline_parts import PipelineConfig

        gen, answer, _ = self._answer("plain", "plain", request.question, PipelineConfig(max_direct_tokens=max_tokens))
        return gen, answer, None

    def decode(self, ids):
        return " ".join(self.words[i] for i in ids)

    def answer_text(self, ids, kind):
        return " ".join(ids)

    def reasoning_token_count(self, ids):
        return len(ids)
