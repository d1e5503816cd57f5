"""Worker process for reward functions (run as a script by ``containment.RewardPool``).

``argv[1]`` is a JSON object: ``{"path": [...the trainer's sys.path...], "targets": {name: {"spec": ...} or
{"attr": "module:qualname", "pairs": bool}}, "board": fd}``; the worker loads each target the way the trainer did
(``spec``: a ``custom_reward_file`` entry, loaded with ``load_custom_reward_file``; ``attr``: an importable
function, e.g. a built-in verifier), attaches to the shared ``Board`` (``fd``, inherited), writes
``{"ready": true}``, then answers one request per line on stdin:

    -> {"id": 3, "name": "short_answer", "cap": 1024, "stop": false, "items": [["response", "label"], ...]}
    <- {"id": 3, "i": 1, "err": "returned str '1.0', ..."}     (a line per failed call, flushed at once)
    <- {"id": 3, "i": 2, "pair": [gold, pred]}                  (a ``pairs`` target's call handed to math-verify)
    <- {"id": 3, "done": 3}                                     (after the last call)

Before call ``i`` it writes the time to ``board.starts[i]``, after it the value to ``board.values[i]``: the trainer
times each call from its start and kills this process (its whole process group) when one overruns. ``stop``: end
the request at the first failure. Anything the reward functions print goes to stderr.
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
        from mindrl.rewards.containment import Board, call_reward, load_targets

        fns = load_targets(init["targets"])
        board = Board(init["board"])
    except BaseException as e:  # noqa: BLE001 - report instead of dying silently: the trainer shows this text
        out.write(json.dumps({"ready": False, "error": f"cannot load the reward functions: {e!r}"}) + "\n")
        out.flush()
        return 1
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        rid, (fn, pairs), stop = req["id"], fns[req["name"]], req.get("stop")
        if board.cap != req["cap"]:
            board.attach(req["cap"])
        starts, values = board.starts, board.values
        for i, (response, label) in enumerate(req["items"]):
            starts[i] = time.monotonic_ns()
            value, why = call_reward(fn, response, label, pairs)
            if why is None and not isinstance(value, tuple):
                values[i] = value
                continue
            out.write(json.dumps({"id": rid, "i": i, "err": why} if why else {"id": rid, "i": i, "pair": value})
                      + "\n")
            out.flush()
            if why and stop:
                break
        out.write(json.dumps({"id": rid, "done": len(req["items"])}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
