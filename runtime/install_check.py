"""fluid.install_check.run_check(): train a tiny program one step with the Executor and with
data parallelism over two CPU places (every GPU with CUDA), and say whether it works."""

import numpy as np

from . import core, layers, optimizer, unique_name
from .place import cuda_places
from .compiler import CompiledProgram
from .executor import Executor
from .framework import Program, program_guard
from .initializer import ConstantInitializer
from .param_attr import ParamAttr
from .scope import Scope, scope_guard

__all__ = ["run_check"]


def _train_once(places, parallel):
    main, startup = Program(), Program()
    with scope_guard(Scope()), program_guard(main, startup), unique_name.guard():
        inp = layers.data(name="inp", shape=[2, 2])
        out = layers.fc(inp, size=3, param_attr=ParamAttr(initializer=ConstantInitializer(0.1)))
        loss = layers.mean(layers.reduce_sum(out))
        optimizer.SGD(learning_rate=0.01).minimize(loss)
        exe = Executor(places[0])
        exe.run(startup)
        program = CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=places) if parallel else main
        batch = np.ones((len(places) if parallel else 1, 2, 2), dtype=np.float32)
        exe.run(program, feed={"inp": batch}, fetch_list=[loss.name])


def run_check():
    print("Running Verify Fluid Program ... ")
    places = cuda_places() if core.is_compiled_with_cuda() and \
        core.get_cuda_device_count() else [core.CPUPlace(), core.CPUPlace()]
    _train_once(places[:1], parallel=False)
    print("Your Paddle Fluid works well on SINGLE GPU or CPU.")
    _train_once(places, parallel=True)
    print("Your Paddle Fluid works well on MUTIPLE GPU or CPU.")
    print("Your Paddle Fluid is installed successfully! Let's start deep Learning with "
          "Paddle Fluid now")
