"""`routedvlm audit export LOG --out FILE`: the audited requests whose inputs were stored (`--audit-store-inputs`)
and whose gold answer arrived (feedback with `answer`), as a local data set (sample_id, image, question, answer) that
`routedvlm label --dataset FILE` relabels with both models; `train-router --calibration-data` then takes those labels
as fresh calibration rows. Audits without stored inputs or without a gold answer are left out (and counted).
"""
from __future__ import annotations

import pandas as pd

from routedvlm.errors import LabelsError

from .log import read_log


def audited_samples(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """(the data set rows, counts of what was left out)."""
    audits = df[df["kind"] == "audit"].drop_duplicates("request_id", keep="first")
    gold = df[(df["kind"] == "feedback") & df["gold"].notna()].drop_duplicates("request_id", keep="last")
    rows = audits.merge(gold[["request_id", "gold"]], on="request_id", how="left", suffixes=("_audit", ""))
    has_inputs = rows["question"].notna()
    has_gold = rows["gold"].notna()
    keep = rows[has_inputs & has_gold]
    out = pd.DataFrame({"sample_id": keep["request_id"].astype(str), "image": keep["image"],
                        "question": keep["question"].astype(str), "answer": keep["gold"].astype(str)})
    return out.reset_index(drop=True), {"audits": len(rows), "without_inputs": int((~has_inputs).sum()),
                                        "without_gold": int((has_inputs & ~has_gold).sum()), "exported": len(out)}


def export(path, out) -> dict:
    """Write the data set to `out` (parquet); returns the counts. LabelsError when nothing can be exported."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, counts = audited_samples(read_log(path))
    if rows.empty:
        raise LabelsError(f"Nothing to export from {str(path)!r}: {counts['audits']} audits, {counts['without_inputs']} "
                          f"without stored inputs (serve with --audit-store-inputs), {counts['without_gold']} without "
                          "a gold answer (POST /v1/audit/feedback with `answer`).")
    images = [None if v is None or (isinstance(v, float) and v != v) else bytes(v) for v in rows["image"]]
    table = pa.table({"sample_id": rows["sample_id"], "image": pa.array(images, type=pa.binary()),
                      "question": rows["question"], "answer": rows["answer"]})
    pq.write_table(table, str(out))
    return counts
