"""Check a converted checkpoint before you trust it: the directory `bertjax convert` (or your own
conversion) wrote must give the same outputs in bertjax, in transformers and in the PyTorch
mirror, on your own sentences.

    python examples/check_converted_checkpoint.py converted/ "To be, or not to be." ...
"""

import argparse

import jax.numpy as jnp
import numpy as np
import torch
import transformers

import bert_torch
import bertjax
import parity
from bertjax.io import ExportCheckError, verify_export
from bertjax.use.encode import encode

TOLERANCE = 1e-5  # max |diff| relative to the outputs' scale (floored at 1): float32 round-off


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory", help="a Hugging Face directory (or a Hub id)")
    p.add_argument("sentences", nargs="+")
    args = p.parse_args(argv)

    model, tokenizer, report = bertjax.from_pretrained(args.directory, output_loading_info=True)
    print(f"{report.model_class} from {report.format} ({report.directory})")
    try:  # fixed probe inputs: bertjax reloads the directory, transformers loads it
        print(*verify_export(model, tokenizer, report.directory), sep="\n")
    except ExportCheckError as err:
        raise SystemExit(f"{args.directory}: {err}") from None

    # your sentences through all three: bertjax, transformers, the bert_torch mirror
    encoded = encode(tokenizer, args.sentences, max_length=128)
    ids, mask = np.asarray(encoded.input_ids), np.asarray(encoded.attention_mask)
    ours = model(jnp.asarray(ids), attention_mask=jnp.asarray(mask))
    name = type(model).__name__
    hf = getattr(transformers, name).from_pretrained(report.directory, attn_implementation="eager")
    mirror = getattr(bert_torch, name)(model.config)
    mirror.load_state_dict(parity.flax_to_torch(model), strict=True)
    fields = type(model).spec.hf_outputs  # our output -> transformers' name for it
    errors = {}
    with torch.no_grad():
        theirs = hf.eval()(torch.from_numpy(ids).long(), attention_mask=torch.from_numpy(mask))
        mirrored = mirror.eval()(torch.from_numpy(ids).long(),
                                 attention_mask=torch.from_numpy(mask).long())
    for ours_field, hf_field in fields.items():
        mine = np.asarray(getattr(ours, ours_field))
        for who, value in (("transformers", getattr(theirs, hf_field)),
                           ("bert_torch", getattr(mirrored, ours_field))):
            value = value.float().numpy()
            errors[f"{who} {ours_field}"] = float(np.abs(mine - value).max()
                                                  / max(1.0, np.abs(value).max()))
    for what, error in errors.items():
        print(f"{what}: {error:.2e} {'ok' if error <= TOLERANCE else 'DIFFERS'}")
    if max(errors.values()) > TOLERANCE:
        raise SystemExit(f"{args.directory} does not reproduce its outputs within {TOLERANCE:g}")
    return errors


if __name__ == "__main__":
    main()
