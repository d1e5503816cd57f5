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

Processes a call starts do not outlive it: this worker is a child subreaper, and after a call that started one
(an audit event says so), and after every request, it kills and reaps all its descendants (``proctree``).
"""
import json
import os
import sys
import threading
import time


# the audit events of starting a process (os.exec* replaces this one): a call that raised one is cleaned up after
_SPAWN_EVENTS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen"})
_spawned = [False]


def _note_spawns(event, _args):
    if event in _SPAWN_EVENTS:
        _spawned[0] = True


def _exit_with_parent(parent):
    """End this process once the trainer is gone, even while a reward call hangs (it would be an orphan)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            try:  # what the calls started goes too
                from mindrl.rewards.proctree import clean_up_after_calls
                clean_up_after_calls()
            finally:
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
        from mindrl.rewards.proctree import become_subreaper, clean_up_after_calls

        # orphans of what the reward functions start come to this process, which kills them after each call
        become_subreaper()
        sys.addaudithook(_note_spawns)

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
            if _spawned[0]:
                _spawned[0] = False
                clean_up_after_calls()
            if why is None and not isinstance(value, tuple):
                values[i] = value
                continue
            out.write(json.dumps({"id": rid, "i": i, "err": why} if why else {"id": rid, "i": i, "pair": value})
                      + "\n")
            out.flush()
            if why and stop:
                break
        clean_up_after_calls()  # also what C code started, which raises no audit event
        out.write(json.dumps({"id": rid, "done": len(req["items"])}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
