"""How far a zoff run is from its reference run: what the exactness workers report."""


def relative_differences(losses, ref_losses, params, ref_params):
    """{"loss_rel": worst relative difference of a step's loss, "param_rel": relative L2
    difference of the final parameters (dicts name -> tensor, the reference's names)}."""
    loss_rel = max(abs(x - y) / abs(y) for x, y in zip(losses, ref_losses, strict=True))
    num = sum((params[k] - v).square().sum().item() for k, v in ref_params.items())
    den = sum(v.square().sum().item() for v in ref_params.values())
    return {"loss_rel": loss_rel, "param_rel": (num / den) ** 0.5}
