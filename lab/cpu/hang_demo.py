import threading, time, queue

work = queue.Queue()

def all_reduce_wait(step):
    # stands in for a collective that never completes because a peer is gone
    return work.get()

def execute_model(step):
    return all_reduce_wait(step)

def busy_loop():
    step = 0
    while True:
        step += 1
        execute_model(step)

def heartbeat():
    while True:
        time.sleep(0.05)

threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
busy_loop()
