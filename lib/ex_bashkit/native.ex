defmodule ExBashkit.Native do
  @moduledoc false
  # NIF stubs and loading, nothing else. The functions here trust their
  # arguments: every public entry point validates before calling them.
  #
  # Long work (scripts, anything that needs a session's interpreter) never
  # runs inside a NIF call for long: `session_exec/5` and `exec_once/4` run
  # a quick script on the caller's scheduler (bounded by its text and a
  # measured per-command cost, `session/cost.rs`) and anything else on a dirty
  # CPU scheduler for at most a short slice (`callback_reply/2` follows the
  # script it resumes); both return
  # `{:done, ...}` when it completed there; otherwise they, like
  # `session_state/4`, leave the work to the library's runner threads and
  # the answer arrives as `{:ex_bashkit_reply, ref, outcome}` (see
  # `ExBashkit.Callbacks`, `native/ex_bashkit/src/run/runner.rs`).
  # `session_reset/4` of a session built from memory alone is polled on the
  # caller's scheduler first, and returns `{:ok, {:done, reply}}` when it
  # swapped in an interpreter built in advance.

  @on_load :load_nif

  @doc false
  def load_nif do
    path = :filename.join(:code.priv_dir(:ex_bashkit), ~c"native/ex_bashkit")
    :erlang.load_nif(path, runtime_config())
  end

  # Interpreter thread settings from `config :ex_bashkit, ...`, read once.
  # The NIF checks each range (`run/runtime.rs`); `runner_nice: 0` is valid.
  defp runtime_config do
    for key <- [:worker_threads, :max_script_threads, :stack_size, :runner_nice],
        value = Application.get_env(:ex_bashkit, key),
        is_integer(value) and value >= 0,
        do: {key, value}
  end

  def answer_slack_ms, do: :erlang.nif_error(:nif_not_loaded)
  def session_new(_config), do: :erlang.nif_error(:nif_not_loaded)
  def session_new_inline(_config), do: :erlang.nif_error(:nif_not_loaded)
  def session_exec(_session, _script, _opts, _pid, _ref), do: :erlang.nif_error(:nif_not_loaded)
  def exec_once(_config, _script, _pid, _ref), do: :erlang.nif_error(:nif_not_loaded)
  def session_info(_session), do: :erlang.nif_error(:nif_not_loaded)
  def live_sessions, do: :erlang.nif_error(:nif_not_loaded)
  def running_scripts, do: :erlang.nif_error(:nif_not_loaded)
  def callback_reply(_call_id, _answer), do: :erlang.nif_error(:nif_not_loaded)
  def session_cancel(_session), do: :erlang.nif_error(:nif_not_loaded)
  def session_cancel_exec(_session, _id), do: :erlang.nif_error(:nif_not_loaded)
  def session_give_up_exec(_session, _id), do: :erlang.nif_error(:nif_not_loaded)
  def exec_once_give_up(_handle), do: :erlang.nif_error(:nif_not_loaded)
  def session_state(_session, _call, _pid, _ref), do: :erlang.nif_error(:nif_not_loaded)
  def session_reset(_session, _call, _pid, _ref), do: :erlang.nif_error(:nif_not_loaded)

  def session_snapshot(_session, _request, _call, _pid, _ref),
    do: :erlang.nif_error(:nif_not_loaded)

  def session_restore(_session, _bytes, _key, _call, _pid, _ref),
    do: :erlang.nif_error(:nif_not_loaded)

  # History in the store (`session/history.rs`): commit, checkout and diff
  # are submitted like snapshot/restore; the rest answer at once.
  def session_history_commit(_session, _request, _call, _pid, _ref),
    do: :erlang.nif_error(:nif_not_loaded)

  def session_history_checkout(_session, _commit, _objects, _kept, _limit, _call, _pid, _ref),
    do: :erlang.nif_error(:nif_not_loaded)

  def session_history_diff(_session, _from, _to, _objects, _call, _pid, _ref),
    do: :erlang.nif_error(:nif_not_loaded)

  # A fork of the state now into a session built beside it (`session/fork.rs`).
  def session_fork(_session, _child, _call, _pid, _ref), do: :erlang.nif_error(:nif_not_loaded)

  def session_history_kept(_session), do: :erlang.nif_error(:nif_not_loaded)
  def history_roots, do: :erlang.nif_error(:nif_not_loaded)
  def history_read_commit(_id, _blob), do: :erlang.nif_error(:nif_not_loaded)

  # The filesystem API: one request term (see `session/fs.rs`), answered here.
  def fs_call(_session, _request), do: :erlang.nif_error(:nif_not_loaded)

  # `isolation: :process`: the node's handle on a session in a worker, and
  # the watchdog's SIGKILL.
  def remote_session(_worker, _sid), do: :erlang.nif_error(:nif_not_loaded)
  def kill_os_process(_os_pid), do: :erlang.nif_error(:nif_not_loaded)

  # The parser's verdict on an input: `:complete | :incomplete | {:error, msg}`.
  def parse_status(_script), do: :erlang.nif_error(:nif_not_loaded)

  # Search and runtime mounts (`native/ex_bashkit/src/search.rs`,
  # `session/mounts.rs`): submitted like state/reset, answered by message;
  # `session_describe/1` answers at once.
  def session_glob(_session, _request, _pid, _ref), do: :erlang.nif_error(:nif_not_loaded)
  def session_grep(_session, _request, _pid, _ref), do: :erlang.nif_error(:nif_not_loaded)
  def session_mount(_session, _spec, _pid, _ref), do: :erlang.nif_error(:nif_not_loaded)
  def session_unmount(_session, _vfs_path, _pid, _ref), do: :erlang.nif_error(:nif_not_loaded)
  def session_describe(_session), do: :erlang.nif_error(:nif_not_loaded)

  # Tar images and shared base images (`image/archive.rs`, `session/tar.rs`, `image.rs`).
  def session_export_tar(_session, _request, _pid, _ref), do: :erlang.nif_error(:nif_not_loaded)
  def image_build(_spec), do: :erlang.nif_error(:nif_not_loaded)
  def image_tar(_image), do: :erlang.nif_error(:nif_not_loaded)

  # JSON for the MCP server (`term/json.rs`): `{:ok, term} | {:error, message}`
  # and `{:ok, binary} | {:error, message}`, bounded, on a dirty scheduler.
  def json_decode(_binary), do: :erlang.nif_error(:nif_not_loaded)
  def json_encode(_term), do: :erlang.nif_error(:nif_not_loaded)
end
