"""fluid.io.save_inference_model / load_inference_model with Paddle 1.8's behaviour.

save_inference_model(dirname, feeded_var_names, target_vars, executor, main_program=None,
model_filename=None, params_filename=None, export_for_deployment=True, program_only=False):
each target gets a `scale(x, 1.0)` named save_infer_model/scale_<i> appended to main_program
(its output is what the model fetches, as in Paddle); the program is pruned to what the
targets need given the fed variables, switched to inference mode, and written to
`dirname/__model__` (or model_filename) in runtime/program_io.py's format; its persistables
(the parameters inference needs) are saved with save_persistables (one file per variable, or
params_filename). export_for_deployment=False writes the whole program as
`<model file>.main_program`. Returns the fetched names.

load_inference_model(dirname, executor, model_filename=None, params_filename=None) returns
[program, feed_target_names, fetch_targets] with the parameters loaded into the global scope.
dirname=None reads from memory: model_filename holds the model's bytes and params_filename
the bytes save_persistables(executor, None, program) returned.
"""

import os
import warnings

from . import program_io
from .compiler import CompiledProgram
from .framework import Program, Variable, default_main_program, program_guard
from .io import load_persistables, save_persistables


def save_inference_model(dirname, feeded_var_names, target_vars, executor, main_program=None,
                         model_filename=None, params_filename=None, export_for_deployment=True,
                         program_only=False):
    feeded_var_names = _feed_names(feeded_var_names, export_for_deployment)
    target_vars = _targets(target_vars, export_for_deployment)
    main_program = _valid_program(main_program)
    if any(op.type == "auc" for op in main_program.global_block().ops):
        warnings.warn("please ensure that you have set the auc states to zeros before saving "
                      "inference model")
    with program_guard(main_program):
        from .layers.nn import scale
        target_vars = [scale(v, 1.0, name=f"save_infer_model/scale_{i}")
                       for i, v in enumerate(target_vars)]
    fetch_names = [v.name for v in target_vars]
    dirname = os.path.normpath(os.fspath(dirname))
    os.makedirs(dirname, exist_ok=True)
    model_path = os.path.join(dirname, os.path.basename(model_filename or "__model__"))
    if export_for_deployment:
        program = main_program._prune_with_input(feeded_var_names, target_vars)
        program = program._inference_optimize(prune_read_op=True)
        _write(model_path, program_io.serialize(program, feeded_var_names, fetch_names))
    else:
        program = main_program
        _write(model_path + ".main_program", program_io.serialize(program, [], []))
    if program_only:
        warnings.warn("save_inference_model specified the param `program_only` to True, It "
                      "will not save params of Program.")
        return fetch_names
    save_persistables(executor, dirname, program,
                      os.path.basename(params_filename) if params_filename else None)
    return fetch_names


def load_inference_model(dirname, executor, model_filename=None, params_filename=None,
                         pserver_endpoints=None):
    if dirname is not None:
        dirname = os.path.normpath(os.fspath(dirname))
        if not os.path.isdir(dirname):
            raise ValueError(f"There is no directory named {dirname!r}")
        model_path = os.path.join(dirname, os.path.basename(model_filename or "__model__"))
        with open(model_path, "rb") as f:
            program = program_io.parse(f.read(), model_path)
        if params_filename is not None:
            params_filename = os.path.basename(params_filename)
    else:
        if params_filename is None:
            raise ValueError("The path of params cannot be None when the directory path is "
                             "None.")
        program = program_io.parse(model_filename, "<model bytes>")
    load_persistables(executor, dirname, program, params_filename)
    fetch_targets = [program.global_block().var(n) for n in program._fetch_targets]
    return [program, list(program._feed_targets), fetch_targets]


def get_parameter_value(para, executor):
    """The value of parameter `para` (a Parameter) in the global scope, as NumPy."""
    from .framework import Parameter
    if not isinstance(para, Parameter):
        raise TypeError(f"get_parameter_value needs a Parameter, got {type(para).__name__}")
    return executor.run(_fetch_program(para), fetch_list=[para.name])[0]


def get_parameter_value_by_name(name, executor, program=None):
    """The value of the parameter called `name` of `program` (default: the main program)."""
    program = default_main_program() if program is None else program
    return get_parameter_value(program.global_block().var(name), executor)


def _fetch_program(var):
    """An empty program declaring `var`: running it fetches the scope's value."""
    program = Program()
    program.global_block().vars[var.name] = var._copy_to(program.global_block())
    return program


def _feed_names(names, export_for_deployment):
    if isinstance(names, str):
        return [names]
    if export_for_deployment and names:
        if not all(isinstance(n, str) for n in names):
            raise ValueError("'feed_var_names' should be a list of str.")
    return list(names or [])


def _targets(targets, export_for_deployment):
    if isinstance(targets, Variable):
        return [targets]
    if export_for_deployment:
        if not targets or not all(isinstance(v, Variable) for v in targets):
            raise ValueError("'target_vars' should be a list of Variable.")
    return list(targets or [])


def _valid_program(program):
    if program is None:
        return default_main_program()
    if isinstance(program, CompiledProgram):
        warnings.warn("The input is a CompiledProgram, this is not recommended.")
        program = program._program
    if not isinstance(program, Program):
        raise TypeError(f"The type of input main_program is invalid, expected type is "
                        f"fluid.Program, but received {type(program)}")
    return program


def _write(path, raw):
    from .atomic import atomic_write
    atomic_write(path, lambda f: f.write(raw))
