import ctypes, threading, time

def engine_step(n):
    if n == 3:
        ctypes.string_at(0)  # NULL read: SIGSEGV
    return n

def busy_loop():
    for n in range(10):
        engine_step(n)

def heartbeat():
    while True:
        time.sleep(0.1)

threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
busy_loop()
