"""Fine-tune a Hugging Face BERT (a Hub id or a directory) on your own labelled text: a CSV or
JSON lines file with `text` (and optionally `text_pair`) and `label`, then predict.

    python examples/finetune_your_data.py google-bert/bert-base-uncased train.csv --epochs 3
"""

import argparse
from pathlib import Path

import bertjax
from bertjax import data
from bertjax.train import OptimConfig, keep_freed_memory


def main(argv: list[str] | None = None) -> bertjax.FinetuneResult:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="a Hub id, a Hugging Face directory or a bertjax pretrain run")
    p.add_argument("train", type=Path, help="CSV or JSON lines: text, [text_pair], label")
    p.add_argument("--validation", type=Path, help="default: 10%% of the training file")
    p.add_argument("--out", type=Path, default=Path("runs/finetuned"))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--learning-rate", type=float, default=5e-5)
    p.add_argument("--max-length", type=int, default=128)
    args = p.parse_args(argv)
    keep_freed_memory()  # on a CPU, before the first JAX computation: steps reuse memory

    examples = data.read_examples(args.train)
    if args.validation:
        train, validation = examples, data.read_examples(args.validation)
    else:
        train, validation = data.split_examples(examples, 0.1, seed=0)
    labels = data.label_names(train)  # the head's labels, as config.json will name them
    model, tokenizer, report = bertjax.from_pretrained(
        args.model, model_cls=bertjax.BertForSequenceClassification, id2label=labels,
        output_loading_info=True)
    print(f"loaded {report.model_class} from {report.format}; new heads: "
          f"{', '.join(report.initialised_heads) or 'none'}")

    optim = OptimConfig(learning_rate=args.learning_rate, warmup_fraction=0.1)  # BERT's recipe
    config = bertjax.FinetuneConfig(epochs=args.epochs, batch_size=args.batch_size, optim=optim,
                                    max_length=args.max_length)
    result = bertjax.finetune(model, tokenizer, train, validation, args.out, config,
                              task=bertjax.ClassificationTask())
    print(f"best epoch {result.best_epoch}: validation {result.validation}")

    # the best epoch, as transformers and bertjax load it: predict a few lines
    best, tokenizer = bertjax.from_pretrained(args.out / "model")
    probabilities = bertjax.tasks.predict(best, tokenizer, validation[:3])
    for example, probs in zip(validation[:3], probabilities, strict=True):
        print(f"{labels[int(probs.argmax())]!r} ({probs.max():.2f}): {example.text[:60]}")
    return result


if __name__ == "__main__":
    main()
