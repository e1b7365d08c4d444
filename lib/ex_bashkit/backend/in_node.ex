defmodule ExBashkit.Backend.InNode do
  @moduledoc false
  # `ExBashkit.Backend` for sessions in this node (`isolation: :in_node`):
  # each operation is a NIF on the session's resource (`ExBashkit.Native`).
  # Long requests answer by message to the caller, tagged with a fresh ref;
  # short ones within the call.

  @behaviour ExBashkit.Backend

  alias ExBashkit.Native

  # A NIF given something that is not a session handle of this VM raises
  # `ArgumentError` (badarg); say what that means. A macro, so that the
  # call runs inline: a closure would cost a short exec 40 ns.
  defmacrop nif(call) do
    quote do
      try do
        unquote(call)
      rescue
        ArgumentError -> not_a_session!(__STACKTRACE__)
      end
    end
  end

  @impl true
  def new(config, inline?, _group) do
    {config, image} = ExBashkit.Backend.base_image(ExBashkit.Session.Credentials.unseal(config))
    result = if inline?, do: Native.session_new_inline(config), else: Native.session_new(config)
    # The image must outlive the build, which finds it by id: this use
    # keeps it referenced until the NIF has returned.
    keep_alive(image)

    with {:ok, resource} <- result, do: {:ok, resource, :in_node}
  end

  @impl true
  def new_beside(config, :in_node, inline?), do: new(config, inline?, nil)

  defp keep_alive(nil), do: :ok
  defp keep_alive(%ExBashkit.Image{ref: ref}), do: :erlang.phash2(ref) && :ok

  @impl true
  def exec(resource, :in_node, script, call, _meta) do
    ref = make_ref()

    case nif(Native.session_exec(resource, script, call, self(), ref)) do
      {:ok, {:done, id, outcome}} -> {:done, id, outcome}
      {:ok, {:ok, id}} -> {:ok, ref, id}
      {:ok, {:ok, id, message}} -> {:ok, ref, id, message}
      {:error, _} = error -> error
    end
  end

  @impl true
  def exec_once(config, script, meta) do
    ref = make_ref()

    case Native.exec_once(config, script, self(), ref) do
      {:ok, {:done, outcome}} ->
        {:done, outcome}

      {:ok, {:ok, handle}} ->
        {:ok, ref, give_up(meta, fn -> Native.exec_once_give_up(handle) end)}

      {:error, message} ->
        {:error, message}
    end
  end

  # Nobody else answers an exec whose command does not check its token past
  # its deadline, so its caller does, the worker's slack later; a deadline
  # no timer can hold (about 49 days) is none.
  @impl true
  def give_up(resource, :in_node, id, meta),
    do: give_up(meta, fn -> Native.session_give_up_exec(resource, id) end)

  defp give_up(%{timeout_ms: ms}, ask) when is_integer(ms) and ms < 0xFFFF_0000 do
    slack = ExBashkit.Deadline.slack_ms()
    %{at: System.monotonic_time(:millisecond) + ms + slack, timeout_ms: ms, ask: ask}
  end

  defp give_up(_meta, _ask), do: nil

  @impl true
  def cancel_exec(resource, :in_node, id) do
    nif(Native.session_cancel_exec(resource, id))
    :ok
  end

  @impl true
  def cancel(resource, :in_node), do: nif(Native.session_cancel(resource))

  @impl true
  def submit(resource, :in_node, op, args) do
    ref = make_ref()

    case nif(apply(Native, :"session_#{op}", [resource | args] ++ [self(), ref])) do
      {:ok, {:done, reply}} -> {:done, reply}
      :ok -> {:ok, ref}
      {:ok, _} -> {:ok, ref}
      {:error, _} = error -> error
    end
  end

  @impl true
  def history_kept(resource, :in_node), do: nif(Native.session_history_kept(resource))

  @impl true
  def history_roots, do: Native.history_roots()

  @impl true
  def fs(resource, :in_node, request), do: nif(Native.fs_call(resource, request))

  @impl true
  def describe(resource, :in_node), do: Native.session_describe(resource)

  @impl true
  def info(resource, :in_node), do: nif(Native.session_info(resource))

  @impl true
  def placement(_resource, :in_node) do
    %{isolation: :in_node, os_pid: nil, group: nil, confinement: unconfined()}
  end

  @doc false
  # The confinement of a process that holds none: the node's.
  @spec unconfined() :: map()
  def unconfined do
    %{seccomp: false, landlock: false, namespaces: [], no_new_privs: false, memory_limit: nil}
  end

  @impl true
  def count(:live_sessions), do: Native.live_sessions()
  def count(:running_scripts), do: Native.running_scripts()

  @impl true
  def callback_reply(:in_node, call_id, answer), do: Native.callback_reply(call_id, answer)

  defp not_a_session!(stacktrace) do
    reraise ArgumentError,
            "not a session of this node: it belongs to another node (a term decoded " <>
              "from elsewhere) or was not made by ExBashkit.Session.new/1",
            stacktrace
  end
end
