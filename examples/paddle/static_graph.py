"""A PaddlePaddle 3.x static-graph job: an MLP built with paddle.static.data and trained by
paddle.static.Executor over synthetic batches (a noisy linear target through a tanh). Each
exe.run of the main program is one step; the startup program's run is not.

    paddletune profile examples/paddle/static_graph.py
    paddletune advise
"""

import argparse

import numpy as np
import paddle


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    paddle.enable_static()
    paddle.seed(0)
    main_program, startup_program = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main_program, startup_program):
        x = paddle.static.data("x", [None, 16], "float32")
        y = paddle.static.data("y", [None, 1], "float32")
        hidden = paddle.static.nn.fc(x, 32, activation="relu")
        prediction = paddle.static.nn.fc(hidden, 1)
        loss = paddle.mean(paddle.square(prediction - y))
        paddle.optimizer.Adam(learning_rate=1e-2).minimize(loss)

    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup_program)
    rng = np.random.default_rng(0)
    weights = rng.normal(size=(16, 1)).astype("float32")
    losses = []
    for step in range(1, args.steps + 1):
        xs = rng.normal(size=(args.batch_size, 16)).astype("float32")
        ys = (np.tanh(xs @ weights) + 0.05 * rng.normal(size=(args.batch_size, 1))
              ).astype("float32")
        (value,) = exe.run(main_program, feed={"x": xs, "y": ys}, fetch_list=[loss])
        if step % 25 == 0 or step == args.steps or step == 1:
            losses.append(float(value))
            print(f"step {step}: loss {losses[-1]:.4f}", flush=True)
    assert len(losses) >= 2 and losses[-1] < 0.5 * losses[0], \
        f"the loss did not fall: {losses}"
    print("done: the loss fell from", round(losses[0], 4), "to", round(losses[-1], 4))


if __name__ == "__main__":
    main()
