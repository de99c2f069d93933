"""Losses of a resumed run against an uninterrupted reference, bit for bit.

    same_losses.py REFERENCE.jsonl RESUMED.jsonl STEPS [--repeats-allowed]

The resumed run's metrics hold steps 1 to STEPS, and each of its losses equals
the reference's at that step. A step run twice (after the last checkpoint
before a kill) must agree too, and is an error without --repeats-allowed.
"""
import json
import sys


def losses_by_step(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if "step" in r:
            out.setdefault(r["step"], []).append(r["loss"])
    return out


def main(argv):
    reference, resumed = losses_by_step(argv[1]), losses_by_step(argv[2])
    steps, repeats_allowed = int(argv[3]), "--repeats-allowed" in argv[4:]
    assert sorted(resumed) == list(range(1, steps + 1)), sorted(resumed)[:5]
    for step, losses in resumed.items():
        assert repeats_allowed or len(losses) == 1, (step, "ran twice")
        for loss in losses:
            assert loss == reference[step][0], (step, loss, reference[step][0])


if __name__ == "__main__":
    main(sys.argv)
