"""Adapters and loading: tiny data sets in each benchmark's real column layout, written as parquet
(images embedded as bytes), JSONL with image paths, an imagefolder and a save_to_disk folder."""
import json

import pytest

from routedvlm.data.adapters import ADAPTERS, known_hub_ids, resolve_adapter
from routedvlm.data.loading import SampleSource, load_samples, load_samples_with_source
from routedvlm.data.sample import Sample
from routedvlm.data.scorers import circular_accuracy
from routedvlm.errors import ConfigError, DatasetError, ImageLoadError


def _img(color):
    from PIL import Image

    return Image.new("RGB", (8, 8), color)


def _mmmu_rows():
    blank = [None, None]
    rows = {
        "id": ["validation_Art_1", "validation_Math_2"],
        "question": ["<image 1> Which style is shown?", "<image 1> <image 2> What is pi to two decimals?"],
        "options": ["['Baroque', 'Cubism', 'Gothic']", "[]"],
        "explanation": ["", ""],
        "image_1": [_img("red"), _img("blue")],
        "image_2": [None, _img("green")],
        "answer": ["B", "3.14"],
        "question_type": ["multiple-choice", "open"],
        "subfield": ["Art", "Math"],
    }
    rows.update({f"image_{i}": blank for i in range(3, 8)})
    return rows


def _layouts():
    """name -> (columns dict, image columns) in the real hub layouts of shared notes `scorers.md`."""
    img2 = [_img("red"), _img("blue")]
    return {
        "chartqa": {"question": ["Share of A?", "Is B larger?"], "answer": ["12.5", "Yes"],
                    "type": ["human_test", "augmented_test"], "image": img2},
        "chartqa_m4": {"query": ["Value of 2019?", "Top label?"], "label": [["40"], ["Asia"]],
                       "human_or_machine": [0, 1], "image": img2},
        "docvqa": {"questionId": ["337", "338"], "question": ["What is the date?", "Who signed?"],
                   "question_types": [["form"], ["layout"]], "docId": [1, 2],
                   "ucsf_document_id": ["a", "b"], "ucsf_document_page_no": ["1", "2"],
                   "answers": [["1/8/93", "January 8, 1993"], None], "data_split": ["val", "val"], "image": img2},
        "textvqa": {"image_id": ["i1", "i2"], "question_id": [34602, 34603], "question": ["Brand?", "Number?"],
                    "question_tokens": [["brand"], ["number"]], "image": img2, "image_width": [8, 8],
                    "image_height": [8, 8], "flickr_original_url": ["", ""], "flickr_300k_url": ["", ""],
                    "answers": [["nokia"] * 8 + ["toshiba"] * 2, ["2"] * 10], "image_classes": [["x"], ["y"]],
                    "set_name": ["val", "val"], "ocr_tokens": [["nokia"], ["2"]]},
        "mmmu": _mmmu_rows(),
        "mmbench": {"index": [7, 1000007, 12], "question": ["Which animal?", "Which animal?", "Color?"],
                    "hint": [None, "nan", "Look at the sky."], "A": ["cat", "dog", "blue"],
                    "B": ["dog", "cat", "red"], "C": ["cow", "cow", None], "D": [None, None, None],
                    "answer": ["B", "A", "A"], "category": ["animals", "animals", "color"],
                    "source": ["x", "x", "y"], "l2-category": ["a", "a", "b"], "comment": ["", "", ""],
                    "split": ["dev", "dev", "dev"], "image": [_img("red"), _img("red"), _img("blue")]},
        "pope": {"id": ["0", "1"], "question_id": ["1", "2"], "question": ["Is there a dog?", "Is there a cat?"],
                 "answer": ["yes", "no"], "image_source": ["COCO_1", "COCO_2"], "category": ["adversarial", "popular"],
                 "image": img2},
        "scienceqa": {"image": img2, "question": ["Which is a mammal?", "Which is hot?"],
                      "choices": [["frog", "whale"], ["ice", "lava", "snow"]], "answer": [1, 1],
                      "hint": ["", "Think of temperature."], "task": ["closed choice"] * 2,
                      "grade": ["grade2"] * 2, "subject": ["natural science"] * 2, "topic": ["biology"] * 2,
                      "category": ["c"] * 2, "skill": ["s"] * 2, "lecture": ["", ""], "solution": ["", ""]},
        "ai2d": {"question": ["Which stage is the egg?", "What eats grass?"],
                 "options": [["A", "B", "C", "D"], ["cow", "lion", "hawk", "snake"]], "answer": ["2", "0"],
                 "image": img2},
        "mathvista": {"pid": ["1", "2", "3"], "question": ["How many?", "What is x?", "Which is largest?"],
                      "image": ["images/1.jpg", "images/2.jpg", "images/3.jpg"],
                      "decoded_image": [_img("red"), _img("blue"), _img("green")],
                      "choices": [None, None, ["3", "5", "7"]], "unit": [None, None, None],
                      "precision": [None, 1.0, None], "answer": ["4", "2.5", "7"],
                      "question_type": ["free_form", "free_form", "multi_choice"],
                      "answer_type": ["integer", "float", "text"],
                      "metadata": [{"source": "s"}] * 3,
                      "query": ["Hint: answer with an integer.\nQuestion: How many?",
                                "Hint: answer with a float with one decimal.\nQuestion: What is x?",
                                "Hint: pick the correct option letter.\nQuestion: Which is largest?\n"
                                "Choices:\n(A) 3\n(B) 5\n(C) 7"]},
        "realworldqa": {"image": img2, "question": [
            "Which object is closer?\nA. the car\nB. the tree\nPlease answer directly with only the letter.",
            "How many lanes are there? Please answer directly with a single word or number."],
            "answer": ["A", "3"]},
    }


def _write_parquet(columns, path):
    import datasets

    features = None
    if "image_1" in columns:  # MMMU: null image columns need their type spelled out
        ds0 = datasets.Dataset.from_dict({k: v for k, v in columns.items() if not k.startswith("image_")})
        features = ds0.features.copy()
        for i in range(1, 8):
            features[f"image_{i}"] = datasets.Image()
        columns = {k: columns[k] for k in features}
    ds = datasets.Dataset.from_dict(columns, features=features)
    ds.to_parquet(str(path))
    return path


@pytest.fixture(scope="session")
def bench_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    for name, columns in _layouts().items():
        _write_parquet(columns, root / f"{name}.parquet")
    return root


# Expectations per adapter: (ids, references of row 0, task types, a correct prediction for row 0).
EXPECTED = {
    "chartqa": (["test-0", "test-1"], ["12.5"], ["numeric", "yes_no"], "12.4"),
    "chartqa_m4": (["test-0", "test-1"], ["40"], ["numeric", "open"], "40"),
    "docvqa": (["337", "338"], ["1/8/93", "January 8, 1993"], ["open", "open"], "1/8/93"),
    "infovqa": (["337", "338"], ["1/8/93", "January 8, 1993"], ["open", "open"], "january 8, 1993"),
    "textvqa": (["34602", "34603"], ["nokia"] * 8 + ["toshiba"] * 2, ["open", "open"], "Nokia"),
    "mmmu": (["validation_Art_1", "validation_Math_2"], ["B"], ["multiple_choice", "numeric"], "(B)"),
    "mmbench": (["7", "1000007", "12"], ["B"], ["multiple_choice"] * 3, "B"),
    "pope": (["1", "2"], ["yes"], ["yes_no", "yes_no"], "Yes."),
    "scienceqa": (["test-0", "test-1"], ["B"], ["multiple_choice"] * 2, "B"),
    "ai2d": (["test-0", "test-1"], ["C"], ["multiple_choice"] * 2, "C"),
    "mathvista": (["1", "2", "3"], ["4"], ["numeric", "numeric", "multiple_choice"], "4"),
    "realworldqa": (["test-0", "test-1"], ["A"], ["multiple_choice", "numeric"], "A."),
}
FILE_OF = {"infovqa": "docvqa"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_benchmark_layout_loads_through_its_adapter(bench_dir, name):
    ids, refs0, tasks, good = EXPECTED[name]
    path = bench_dir / f"{FILE_OF.get(name, name)}.parquet"
    samples, source = load_samples_with_source(str(path), adapter=name, split="test")
    assert [s.sample_id for s in samples] == ids
    assert samples[0].references == refs0
    assert [s.task_type for s in samples] == tasks
    assert {s.dataset for s in samples} == {name}
    assert {s.metric for s in samples} == {ADAPTERS[name].metric}
    assert all(s.images and not isinstance(s.images[0], str) for s in samples)
    assert samples[0].score(good) == 1.0
    assert source.adapter == name and source.split == "test"


def test_local_layouts_are_detected_from_their_columns(bench_dir):
    detected = {name: load_samples_with_source(str(bench_dir / f"{name}.parquet"))[1].adapter
                for name in _layouts()}
    # realworldqa has exactly the generic layout, so the generic `local` adapter takes it
    assert detected == {**{n: n for n in _layouts()}, "realworldqa": "local"}


def test_mmbench_prompt_options_hint_and_rotations(bench_dir):
    samples = load_samples(str(bench_dir / "mmbench.parquet"), adapter="mmbench")
    first, _, third = samples
    assert first.options == {"A": "cat", "B": "dog", "C": "cow"}
    assert first.prompt == ("Which animal?\nA. cat\nB. dog\nC. cow\n"
                            "Answer with the option's letter from the given choices directly.")
    assert third.prompt.startswith("Look at the sky.\nColor?\nA. blue\nB. red\n")
    rows = [{"sample_id": s.sample_id, "correct": s.score("B") == 1.0} for s in samples]
    assert circular_accuracy(rows) == 0.0  # question 7: rotation 1000007 wants A
    rows = [{"sample_id": s.sample_id, "correct": True} for s in samples]
    assert circular_accuracy(rows) == 1.0


def test_mmmu_images_options_and_open_questions(bench_dir):
    mc, open_q = load_samples(str(bench_dir / "mmmu.parquet"), adapter="mmmu")
    assert len(mc.images) == 1 and len(open_q.images) == 2
    assert mc.options == {"A": "Baroque", "B": "Cubism", "C": "Gothic"}
    assert mc.extra == {"question_type": "multiple-choice"}
    assert open_q.options is None
    assert open_q.score("The value is 3.14159") == 1.0
    assert open_q.prompt.endswith("Answer the question using a single word or phrase.")


def test_mathvista_uses_query_and_choices(bench_dir):
    samples = load_samples(str(bench_dir / "mathvista.parquet"), adapter="mathvista")
    assert samples[2].prompt.endswith("(C) 7")
    assert samples[2].prompt == samples[2].prompt_text
    assert samples[1].extra["precision"] == 1.0
    assert samples[1].score("2.45") == 1.0
    assert samples[2].score("C") == 1.0
    assert samples[2].score("(B) 5") == 0.0


def test_short_answer_instructions(bench_dir):
    chart = load_samples(str(bench_dir / "chartqa.parquet"), adapter="chartqa")[0]
    assert chart.prompt == "Share of A?\nAnswer the question using a single word or phrase."
    doc = load_samples(str(bench_dir / "docvqa.parquet"), adapter="docvqa")[0]
    assert doc.prompt == "What is the date?\nAnswer the question using a single word or phrase."
    rw = load_samples(str(bench_dir / "realworldqa.parquet"), adapter="realworldqa")[1]
    assert rw.prompt == rw.question  # the question carries its own instruction


@pytest.mark.parametrize("hub_id,expected", [
    ("lmms-lab/ChartQA", "chartqa"), ("lmms-lab-encoder/ChartQA", "chartqa"),
    ("HuggingFaceM4/ChartQA", "chartqa_m4"), ("lmms-lab/DocVQA", "docvqa"), ("lmms-lab/textvqa", "textvqa"),
    ("lmms-lab-encoder/textvqa", "textvqa"), ("lmms-lab/MMMU", "mmmu"), ("lmms-lab/MMBench", "mmbench"),
    ("lmms-lab/POPE", "pope"), ("lmms-lab/ScienceQA", "scienceqa"), ("lmms-lab/ai2d", "ai2d"),
    ("AI4Math/MathVista", "mathvista"), ("lmms-lab/RealWorldQA", "realworldqa"),
    ("xai-org/RealworldQA", "realworldqa"), ("lmms-lab-encoder/MMBench", "mmbench"),
])
def test_hub_ids_resolve_in_both_lmms_orgs(hub_id, expected):
    assert resolve_adapter(hub_id).name == expected


def test_docvqa_config_picks_infographicvqa():
    assert resolve_adapter("lmms-lab/DocVQA", config="InfographicVQA").name == "infovqa"
    assert resolve_adapter("lmms-lab-encoder/DocVQA", config="DocVQA").name == "docvqa"
    assert "lmms-lab-encoder/MMMU" in known_hub_ids()


def test_unknown_ids_and_adapters_are_reported():
    with pytest.raises(DatasetError, match=r"^Unknown data set 'someone/else': .*Known hub ids: .*lmms-lab/MMMU"):
        resolve_adapter("someone/else")
    with pytest.raises(ConfigError, match=r"^The `adapter` must be one of 'ai2d', .* or 'toyworld'; got 'nope'"):
        resolve_adapter("x", adapter="nope")


def test_hub_loading_passes_default_config_and_split(bench_dir, monkeypatch):
    import datasets

    calls = []
    local = datasets.load_dataset("parquet", data_files={"dev": [str(bench_dir / "mmbench.parquet")]}, split="dev")

    def fake_load_dataset(path, name=None, split=None, **kwargs):
        calls.append((path, name, split))
        return local

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    samples, source = load_samples_with_source("lmms-lab-encoder/MMBench", limit=2)
    assert calls == [("lmms-lab-encoder/MMBench", "en", "dev")]
    assert [s.sample_id for s in samples] == ["7", "1000007"]
    assert source.to_dict() == {"dataset": "lmms-lab-encoder/MMBench", "config": "en", "split": "dev",
                                "adapter": "mmbench", "limit": 2}


def test_hub_load_failure_becomes_dataset_error(monkeypatch):
    import datasets

    def broken(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.setattr(datasets, "load_dataset", broken)
    with pytest.raises(DatasetError, match=r"^Cannot load hub data set 'lmms-lab/POPE' \(config None, split 'test'\)"):
        load_samples("lmms-lab/POPE")


def test_missing_columns_name_missing_found_and_adapter(bench_dir):
    with pytest.raises(DatasetError, match=r"^Data set .*pope.parquet' \(split 'train'\) lacks columns that "
                                           r"adapter 'mmbench' needs: missing \['index', 'A', 'B'\]; found "):
        load_samples(str(bench_dir / "pope.parquet"), adapter="mmbench")


def test_reload_by_ids_through_the_recorded_source(bench_dir):
    _, source = load_samples_with_source(str(bench_dir / "textvqa.parquet"))
    record = json.loads(json.dumps(source.to_dict()))
    again = load_samples(**SampleSource.from_dict(record).to_dict(), ids=["34603", "34602"])
    assert [s.sample_id for s in again] == ["34603", "34602"]
    with pytest.raises(DatasetError, match=r"^1 requested sample ids are not in the data set \(first: \['9'\]\)"):
        load_samples(**record, ids=["9"])
    with pytest.raises(DatasetError, match=r"^1 requested sample ids are not in the data set \(first: \['34603'\]\)"):
        load_samples(**{**record, "limit": 1}, ids=["34603"])  # limit bounds the rows ids are looked up in
    by_row = load_samples(str(bench_dir / "ai2d.parquet"), ids=["train-1"])
    assert by_row[0].references == ["A"]


def test_sample_source_validation():
    with pytest.raises(ConfigError, match=r"^The `limit` must be a non-negative integer or None; got -1"):
        SampleSource("x", limit=-1)
    with pytest.raises(ConfigError, match=r"^Unknown sample source keys \['shuffle'\]"):
        SampleSource.from_dict({"dataset": "x", "shuffle": True})


def test_duplicate_ids_are_rejected(tmp_path):
    path = tmp_path / "dups.jsonl"
    _img("red").save(tmp_path / "a.png")
    rows = [{"id": "1", "question": "q", "answer": "a", "image": "a.png"}] * 2
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(DatasetError, match=r"^Sample ids must be unique; column `id` repeats \['1'\]"):
        load_samples(str(path))


@pytest.fixture()
def jsonl_dir(tmp_path):
    (tmp_path / "imgs").mkdir()
    _img("red").save(tmp_path / "imgs" / "a.png")
    _img("blue").save(tmp_path / "imgs" / "b.png")
    rows = [
        {"question": "What color?", "answer": "red", "image": "imgs/a.png"},
        # `choices`, not `options`: question/options/answer/image is exactly AI2D's layout
        {"question": "Pick one", "answers": None, "choices": ["red", "blue"], "answer": "B", "image": "imgs/b.png"},
    ]
    (tmp_path / "mine.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return tmp_path


def test_jsonl_with_relative_image_paths(jsonl_dir):
    samples = load_samples(str(jsonl_dir / "mine.jsonl"))
    assert [s.sample_id for s in samples] == ["train-0", "train-1"]
    assert samples[0].images == [str(jsonl_dir / "imgs" / "a.png")]
    assert samples[0].dataset == "mine" and samples[0].metric == "exact_match"
    assert samples[0].task_type == "open" and samples[0].references == ["red"]
    assert samples[1].references == ["B"]  # `answers` is null in that row: `answer` is used
    assert samples[1].options == {"A": "red", "B": "blue"} and samples[1].task_type == "multiple_choice"
    record = json.loads(json.dumps(samples[1].to_record()))
    assert Sample.from_record(record) == samples[1]


def test_local_adapter_can_be_forced_over_detection(bench_dir):
    samples = load_samples(str(bench_dir / "ai2d.parquet"), adapter="local")
    assert samples[0].references == ["2"] and samples[0].metric == "exact_match"


def test_jsonl_missing_image_file(jsonl_dir):
    (jsonl_dir / "imgs" / "b.png").unlink()
    with pytest.raises(ImageLoadError, match=r"^Sample 'train-1': image file .*b.png' does not exist"):
        load_samples(str(jsonl_dir / "mine.jsonl"))


def test_imagefolder_with_metadata(tmp_path):
    folder = tmp_path / "shapes"
    folder.mkdir()
    for name, color in [("a.png", "red"), ("b.png", "green")]:
        _img(color).save(folder / name)
    meta = [{"file_name": "a.png", "question": "Color?", "answer": "red"},
            {"file_name": "b.png", "question": "Is it green?", "answer": "yes"}]
    (folder / "metadata.jsonl").write_text("\n".join(json.dumps(m) for m in meta))
    samples = load_samples(str(folder))
    assert [s.references for s in samples] == [["red"], ["yes"]]
    assert [s.task_type for s in samples] == ["open", "yes_no"]
    assert samples[0].images[0].size == (8, 8)
    assert samples[0].dataset == "shapes"


def test_save_to_disk_dataset_dict_and_split_choice(tmp_path, bench_dir):
    import datasets

    ds = datasets.load_dataset("parquet", data_files={"dev": [str(bench_dir / "pope.parquet")]}, split="dev")
    datasets.DatasetDict({"test": ds}).save_to_disk(str(tmp_path / "pope_disk"))
    samples = load_samples(str(tmp_path / "pope_disk"), adapter="pope")
    assert [s.sample_id for s in samples] == ["1", "2"]
    with pytest.raises(DatasetError, match=r"^The `split` must be one of \['test'\] for .*; got 'dev'"):
        load_samples(str(tmp_path / "pope_disk"), split="dev")


def test_sample_validation_and_record_round_trip():
    with pytest.raises(DatasetError, match=r"^The `task_type` of sample '1' must be one of 'multiple_choice', "
                                           r"'numeric', 'open' or 'yes_no'; got 'essay'"):
        Sample("1", [], "q", None, ["a"], "essay", "d", "exact_match")
    with pytest.raises(DatasetError, match=r"^The `metric` of sample '1' must be one of 'anls'"):
        Sample("1", [], "q", None, ["a"], "open", "d", "bleu")
    with pytest.raises(DatasetError, match=r"^A sample record needs the keys .*missing metric"):
        Sample.from_record({"sample_id": "1", "question": "q", "references": [], "task_type": "open",
                            "dataset": "d"})
    sample = Sample(1, [_img("red"), "/x.png"], "q", {"A": "x"}, "A", "multiple_choice", "d", "multiple_choice")
    record = sample.to_record()
    assert record["images"] == ["/x.png"] and record["num_images"] == 2
    assert sample.sample_id == "1" and sample.references == ["A"]
    assert sample.prompt == "q\nA. x\nAnswer with the option's letter from the given choices directly."


def test_plain_parquet_with_raw_bytes_and_path_lists(tmp_path):
    import io

    import pandas as pd

    buf = io.BytesIO()
    _img("red").save(buf, format="PNG")
    _img("blue").save(tmp_path / "b.png")
    pd.DataFrame({"question": ["Color?"], "answer": ["red"], "image": [buf.getvalue()]}).to_parquet(
        tmp_path / "bytes.parquet")
    sample = load_samples(str(tmp_path / "bytes.parquet"))[0]
    assert sample.images[0].getpixel((0, 0)) == (255, 0, 0)
    pd.DataFrame({"id": ["q1"], "question": ["Same?"], "answers": [["yes", "yes"]],
                  "images": [["b.png", "b.png"]]}).to_parquet(tmp_path / "paths.parquet")
    sample = load_samples(str(tmp_path / "paths.parquet"))[0]
    assert sample.sample_id == "q1" and sample.images == [str(tmp_path / "b.png")] * 2
    assert sample.task_type == "yes_no" and sample.references == ["yes", "yes"]
    pd.DataFrame({"question": ["q"], "answer": ["a"], "image": [b"not an image"]}).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ImageLoadError, match=r"^Sample 'train-0': its image bytes cannot be decoded"):
        load_samples(str(tmp_path / "bad.parquet"))


def test_unreadable_file_type_and_no_fitting_adapter(tmp_path):
    (tmp_path / "data.txt").write_text("x")
    with pytest.raises(DatasetError, match=r"^Cannot read .*data.txt: the file must end in \.csv, \.json"):
        load_samples(str(tmp_path / "data.txt"))
    (tmp_path / "odd.jsonl").write_text(json.dumps({"prompt": "q", "target": "a"}))
    with pytest.raises(DatasetError, match=r"^No adapter fits a data set with the columns \['prompt', 'target'\]"):
        load_samples(str(tmp_path / "odd.jsonl"))


def test_local_questions_go_to_the_models_exactly_as_given(tmp_path):
    """Local data has no prompt template by default; the known benchmarks default to lmms-eval's post prompts;
    `prompt_template=` names another (lmms-eval, or a format string with {question}, {context}, {options})."""
    rows = [{"id": "q1", "image": "a.png", "question": "  What is shown?\n", "answer": "a cat"},
            {"id": "q2", "image": "a.png", "question": "Which?", "answer": "B", "options": ["x", "y"]}]
    _img("red").save(tmp_path / "a.png")
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plain, mc = load_samples(str(tmp_path / "qa.jsonl"), adapter="local")  # detection alone would take AI2D's layout
    assert plain.prompt == "  What is shown?\n" and mc.prompt == "Which?"
    assert plain.template.name == "none" and plain.to_record()["prompt_template"]["name"] == "none"
    (tmp_path / "plain.jsonl").write_text(json.dumps(rows[0]) + "\n")  # id, image, question, answer: detected local
    (only,) = load_samples(str(tmp_path / "plain.jsonl"))
    assert only.prompt == "  What is shown?\n" and only.dataset == "plain"
    plain, mc = load_samples(str(tmp_path / "qa.jsonl"), adapter="local", prompt_template="lmms-eval")
    assert plain.prompt == "What is shown?\nAnswer the question using a single word or phrase."
    assert mc.prompt == "Which?\nA. x\nB. y\nAnswer with the option's letter from the given choices directly."
    _, mc = load_samples(str(tmp_path / "qa.jsonl"), adapter="local", prompt_template="Q: {question}\n{options}\nLetter:")
    assert mc.prompt == "Q: Which?\nA. x\nB. y\nLetter:"
    assert Sample.from_record(mc.to_record()).prompt == mc.prompt


def test_bad_prompt_templates_are_config_errors():
    from routedvlm.inference.prompts import PromptTemplate

    with pytest.raises(ConfigError, match=r"^The `prompt_template` must be 'none', 'lmms-eval' or a format string"):
        PromptTemplate.parse("short")
    with pytest.raises(ConfigError, match=r"^The custom prompt template '\{q\}' is invalid: it must contain the "
                                          r"placeholder \{question\}; unknown placeholder\(s\) \['q'\]"):
        PromptTemplate.parse("{q}")
    with pytest.raises(ConfigError, match=r"^The custom prompt template '\{question' is invalid: it is not a valid"):
        PromptTemplate.parse("{question")


def test_runtime_application_of_each_template():
    """RoutedVLM's side: the user's question through the template the labels recorded."""
    from routedvlm.data.adapters import get_adapter
    from routedvlm.inference.prompts import PromptTemplate

    assert PromptTemplate.parse("none").apply(" as is ") == " as is "
    assert PromptTemplate.parse("{context}{question}!{options}").apply("Why?") == "Why?!"
    chart = PromptTemplate.from_dict(get_adapter("chartqa").template().to_dict())
    assert chart.apply("Max?") == "Max?\nAnswer the question using a single word or phrase."
    local = get_adapter("local").template("lmms-eval")  # instruction by task type: MC when options are listed
    assert local.apply("Which?\nA. x\nB. y") == "Which?\nA. x\nB. y\nAnswer with the option's letter from the given choices directly."
    assert local.apply("Max?").endswith("single word or phrase.")
    assert get_adapter("mathvista").template().apply("the query") == "the query"
    assert get_adapter("toyworld").template().name == "none"
