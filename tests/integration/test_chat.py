"""Chat with a model folder on the real cluster (service/chat.py, cleverthis_runtime/chat.py): the answer arrives
in pieces as the helper job generates it, bad settings are refused by name before anything runs, and a folder
that holds no model is a clear error. Checkpoints side by side, and LoRA served as base plus adapter, are
checked on the 2-epoch job of test_finetune."""

from __future__ import annotations

import pytest

from jupyter_cleverthis.errors import BadRequest, ClusterError
from jupyter_cleverthis.service.jobs import JobService

pytestmark = pytest.mark.integration


def test_chat_streams_the_answer_in_pieces_and_names_what_is_wrong(ray_cluster, tiny_model, tmp_path):
    svc = JobService()
    pieces: list[tuple[int, str]] = []
    (answer,) = svc.chat("local", job=None, sources=[tiny_model], prompt="Tell me about rivers", max_new_tokens=16,
                         on_text=lambda i, text: pieces.append((i, text)))
    assert answer["label"] == tiny_model and answer["served_as"] == "the model's weights"
    assert 1 <= answer["new_tokens"] <= 16 and answer["seconds"] > 0
    assert len(pieces) >= 2 and {i for i, _ in pieces} == {0}  # pieces as generated, not one block at the end
    assert "".join(text for _, text in pieces) == answer["text"]

    for bad, field in (({"prompt": "  "}, "prompt"), ({"top_p": 0.0}, "top_p"), ({"temperature": -1.0}, "temperature"),
                       ({"max_new_tokens": 0}, "max_new_tokens"), ({"serve": "fused"}, "serve")):
        with pytest.raises(BadRequest) as e:
            svc.chat("local", job=None, sources=[tiny_model], **{"prompt": "hi", **bad})
        assert e.value.details["field"] == field
    with pytest.raises(ClusterError, match="is not a model folder: it has no config.json"):
        svc.chat("local", job=None, sources=[str(tmp_path)], prompt="hi")
