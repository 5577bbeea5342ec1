"""The toy training script's resumable state round-trips through safetensors (no pickle)."""
import torch

from routedvlm.data.toyworld.train_models import load_state, save_state


def test_training_state_round_trip(tmp_path):
    torch.manual_seed(0)
    model, head = torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-2, betas=(0.9, 0.98))
    for _ in range(2):
        head(model(torch.randn(5, 4))).sum().backward()
        opt.step()
        opt.zero_grad()
    path = tmp_path / "small.safetensors"
    save_state(path, model, head, opt, step=200)
    state = load_state(path)
    assert state["step"] == 200
    model2, head2 = torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)
    opt2 = torch.optim.AdamW(list(model2.parameters()) + list(head2.parameters()), lr=1e-2, betas=(0.9, 0.98))
    model2.load_state_dict(state["model"]), head2.load_state_dict(state["head"])
    opt2.load_state_dict(state["opt"])
    x = torch.randn(5, 4)
    head(model(x)).sum().backward(), head2(model2(x)).sum().backward()  # one more identical step on both
    opt.step(), opt2.step()
    for a, b in zip(list(model.parameters()) + list(head.parameters()), list(model2.parameters()) + list(head2.parameters())):
        assert torch.equal(a, b)
    assert not any(p.suffix == ".tmp" for p in tmp_path.iterdir())
