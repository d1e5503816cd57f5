"""Worker process for user reward functions (run as a script by ``containment.RewardPool``).

``argv[1]`` is a JSON object: ``{"path": [...the trainer's sys.path...], "targets": {name: {"spec": ...} or
{"attr": "module:qualname"}}}``; the worker loads each target the way the trainer did (``spec``: a
``custom_reward_file`` entry, loaded with ``load_custom_reward_file``; ``attr``: an importable function), writes
``{"ready": true}``, then answers one request per line on stdin, one reply per item:

    -> {"id": 3, "name": "short_answer", "items": [["response", "label"], ...]}
    <- {"id": 3, "i": 0, "v": 1.0}          (or {"id": 3, "i": 0, "err": "returned str '1.0', ..."})

Replies are flushed item by item: the trainer times each call from the previous reply and kills this process
(its whole process group) when one overruns. Anything the reward functions print goes to stderr.
"""
import json
import os
import sys
import threading
import time


def _exit_with_parent(parent):
    """End this process once the trainer is gone, even while a reward call hangs (it would be an orphan)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(1)


def main():
    init = json.loads(sys.argv[1])
    sys.path[:] = init["path"]  # the trainer's, not this script's directory
    out = os.fdopen(os.dup(1), "w")  # the protocol channel; print() inside user code goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    try:
        from mindrl.rewards.containment import call_reward, load_targets

        fns = load_targets(init["targets"])
    except BaseException as e:  # noqa: BLE001 - report instead of dying silently: the trainer shows this text
        out.write(json.dumps({"ready": False, "error": f"cannot load the reward functions: {e!r}"}) + "\n")
        out.flush()
        return 1
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        rid, fn = req["id"], fns[req["name"]]
        for i, (response, label) in enumerate(req["items"]):
            value, why = call_reward(fn, response, label)
            reply = {"id": rid, "i": i, "v": value} if why is None else {"id": rid, "i": i, "err": why}
            out.write(json.dumps(reply) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
