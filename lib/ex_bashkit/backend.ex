defmodule ExBashkit.Backend do
  @moduledoc false
  # The one choke point between the public API and where sessions live: a
  # behaviour, with one implementation per transport. A session is in this
  # node (`isolation: :in_node`: a NIF resource, `ExBashkit.Backend.InNode`)
  # or in a worker OS process (`isolation: :process`:
  # `ExBashkit.Backend.InWorker`, through `ExBashkit.Worker`'s port to the
  # same Rust core). Callers name the session's location; this module picks
  # the implementation from it, and is the only place that tells the two
  # apart. Both answer long requests with the same messages,
  # `{:ex_bashkit_reply, ref, outcome}` (plus `:ex_bashkit_output` /
  # `:ex_bashkit_callback` while an exec runs), so the code that waits
  # (`ExBashkit.Request`, `ExBashkit.Callbacks`) is shared.
  #
  # A new session operation is one callback here, its two implementations,
  # and the Rust operation they reach (a NIF in `native/ex_bashkit/src/nif`,
  # a frame in `worker.rs`).

  alias ExBashkit.Backend.{InNode, InWorker}
  alias ExBashkit.Callbacks

  @typedoc "Where a session lives."
  @type location :: :in_node | {:process, atom(), pos_integer()}

  @typedoc """
  A back-call's id, as its request carries it: the NIF's counter in the
  node; in a worker, with the port of the OS process that made it (each
  counts from 1).
  """
  @type call_id :: pos_integer() | {port(), pos_integer()}

  @typedoc "How a session was built: its handle and its location."
  @type built :: {:ok, reference(), location()} | {:error, String.t()}

  @typedoc "What submitting an exec answers (see `exec/5`)."
  @type submitted_exec ::
          {:ok, reference(), pos_integer()}
          | {:ok, reference(), pos_integer(), tuple()}
          | {:done, pos_integer(), Callbacks.outcome()}
          | {:error, String.t()}

  @doc "Build a session from the validated native configuration, in `group`."
  @callback new(config :: map(), inline? :: boolean(), group :: term()) :: built()

  @doc "Build a fork of the session at `location` from `config`, beside it."
  @callback new_beside(config :: map(), location(), inline? :: boolean()) :: built()

  @doc "Submit an exec (see `ExBashkit.Backend.exec/5`)."
  @callback exec(reference(), location(), String.t(), call :: map(), meta :: map() | nil) ::
              submitted_exec()

  @doc "Submit a one-shot script (see `ExBashkit.Backend.exec_once/4`)."
  @callback exec_once(config :: map(), String.t(), meta :: map()) ::
              {:ok, reference(), Callbacks.give_up()}
              | {:done, Callbacks.outcome()}
              | {:error, String.t()}

  @doc "How the caller of exec `id` gives up on it, or nil."
  @callback give_up(reference(), location(), pos_integer(), meta :: map()) ::
              Callbacks.give_up()

  @doc "Stop exec `id`."
  @callback cancel_exec(reference(), location(), pos_integer()) :: :ok

  @doc "Stop the session's running and queued execs; whether one ran."
  @callback cancel(reference(), location()) :: boolean()

  @doc "Submit a call that is not an exec (`state`, `reset`, `mount`, ...)."
  @callback submit(reference(), location(), op :: atom(), args :: list()) ::
              {:ok, reference()} | {:done, term()} | {:error, term()}

  @doc "The commits the session keeps, newest first."
  @callback history_kept(reference(), location()) :: [String.t()] | {:error, String.t()}

  @doc "Every commit the sessions of this transport keep (GC roots)."
  @callback history_roots() :: [String.t()]

  @doc "A filesystem request, answered synchronously."
  @callback fs(reference(), location(), request :: tuple()) :: term()

  @doc "The session's grants (`ExBashkit.Session.Mounts.describe/1`)."
  @callback describe(reference(), location()) :: {:ok, map()} | {:error, String.t()}

  @doc "`{id, running?, cwd | nil}`, or nil when the session cannot say."
  @callback info(reference(), location()) :: {integer(), boolean(), String.t() | nil} | nil

  @doc """
  Where the session runs and how that OS process is confined; the session's
  handle is held until the answer (its process stops with it).
  """
  @callback placement(reference(), location()) :: map()

  @doc "Sessions alive, or scripts running or queued, on this transport."
  @callback count(:live_sessions | :running_scripts) :: non_neg_integer()

  @doc "Answer a back-call of a script running at `location`."
  @callback callback_reply(location(), call_id(), answer :: term()) :: term()

  @doc false
  # Build a session from the validated native configuration. Returns the
  # handle the `%Session{}` keeps (its identity and, through GC, its life)
  # and its location.
  @spec new(map(), :in_node | :process, boolean(), term()) :: built()
  def new(config, isolation, inline?, group \\ nil),
    do: of_isolation(isolation).new(config, inline?, group)

  @doc false
  # Build a fork of the session at `location` from `config`: in the
  # parent's process (the same tenant) when it has one.
  @spec new_beside(map(), location(), boolean()) :: built()
  def new_beside(config, location, inline?),
    do: of(location).new_beside(config, location, inline?)

  @doc false
  # How a session at `location` names the session `resource` at `other` in
  # a request of its own (a fork): the resource in the node, the session
  # id in the same worker; `:elsewhere` in another process.
  @spec beside(location(), reference(), location()) :: {:ok, term()} | :elsewhere
  def beside(:in_node, resource, :in_node), do: {:ok, resource}
  def beside({:process, name, _}, _resource, {:process, name, sid}), do: {:ok, sid}
  def beside(_location, _resource, _other), do: :elsewhere

  @doc false
  # Submit an exec; messages arrive tagged with the returned ref. An exec
  # that completed within the call (in the node, the runner's inline fast
  # path, `run/runner.rs`) is `{:done, id, outcome}` instead: nothing arrives.
  # A quick one that made a back-call within the call returns that first
  # message itself, `{:ok, ref, id, message}`: handle it before the mailbox.
  # `meta` is the exec's deadline, which a worker's owner answers by; in the
  # node (`nil`) the caller keeps it.
  @spec exec(reference(), location(), String.t(), map(), map() | nil) :: submitted_exec()
  def exec(resource, location, script, call, meta),
    do: of(location).exec(resource, location, script, call, meta)

  @doc false
  # `config` is a session's native configuration with at most `:limits`
  # given (`ExBashkit.exec/2`; the core has no defaults of its own).
  # Answers like `exec/5`.
  @spec exec_once(map(), String.t(), :in_node | :process, map()) ::
          {:ok, reference(), Callbacks.give_up()}
          | {:done, Callbacks.outcome()}
          | {:error, String.t()}
  def exec_once(config, script, isolation, meta),
    do: of_isolation(isolation).exec_once(config, script, meta)

  @doc false
  # How the caller of exec `id` gives up on it (`Callbacks.await/4`): in
  # the node, nobody else answers an exec whose command does not check its
  # token past its deadline, so its caller does, as a worker's owner does
  # (`ExBashkit.Worker`), the same slack later. nil in a worker, whose
  # owner answers.
  @spec give_up(reference(), location(), pos_integer(), map()) :: Callbacks.give_up()
  def give_up(resource, location, id, meta),
    do: of(location).give_up(resource, location, id, meta)

  @doc false
  @spec cancel_exec(reference(), location(), pos_integer()) :: :ok
  def cancel_exec(resource, location, id), do: of(location).cancel_exec(resource, location, id)

  @doc false
  @spec cancel(reference(), location()) :: boolean()
  def cancel(resource, location), do: of(location).cancel(resource, location)

  @doc false
  # `state`, `reset`, `snapshot`, `restore`, history, mounts...: submitted,
  # answered by message, or, in the node, answered within the call
  # (`{:done, reply}`: a reset that swapped in an interpreter built in
  # advance).
  @spec submit(reference(), location(), atom(), list()) ::
          {:ok, reference()} | {:done, term()} | {:error, term()}
  def submit(resource, location, op, args), do: of(location).submit(resource, location, op, args)

  @doc false
  # The commits a session keeps, newest first (`session/history.rs`).
  @spec history_kept(reference(), location()) :: [String.t()] | {:error, String.t()}
  def history_kept(resource, location), do: of(location).history_kept(resource, location)

  @doc false
  # Every commit a live session of this node keeps, in the node and in
  # every worker: the store's GC roots. Raises when a worker cannot say,
  # so that the collector frees nothing on doubt.
  @spec history_roots() :: [String.t()]
  def history_roots, do: Enum.uniq(InNode.history_roots() ++ InWorker.history_roots())

  @doc false
  # A filesystem request (see `session/fs.rs`), answered synchronously.
  @spec fs(reference(), location(), tuple()) :: term()
  def fs(resource, location, request), do: of(location).fs(resource, location, request)

  @doc false
  # `{:ok, grants}` of `session/mounts.rs` `describe` (mounts, network, limits).
  @spec describe(reference(), location()) :: {:ok, map()} | {:error, String.t()}
  def describe(resource, location), do: of(location).describe(resource, location)

  @doc false
  # `{id, running?, cwd | nil}`, or nil when the session cannot say.
  @spec info(reference(), location()) :: {integer(), boolean(), String.t() | nil} | nil
  def info(resource, location), do: of(location).info(resource, location)

  @doc false
  # Where the session runs and how that OS process is confined
  # (`ExBashkit.Session.info/1`).
  @spec placement(reference(), location()) :: map()
  def placement(resource, location), do: of(location).placement(resource, location)

  @doc false
  # Sessions alive, in the node and in every worker (leak tests).
  @spec live_sessions() :: non_neg_integer()
  def live_sessions, do: InNode.count(:live_sessions) + InWorker.count(:live_sessions)

  @doc false
  # Scripts running or queued, in the node and in every worker.
  @spec running_scripts() :: non_neg_integer()
  def running_scripts, do: InNode.count(:running_scripts) + InWorker.count(:running_scripts)

  @doc false
  # Answer a back-call of a script running at `location`. In the node, for
  # a quick script, the value is the message the script sent next during
  # the call (its final reply or its next back-call), returned instead of
  # sent (`ExBashkit.Callbacks` handles it).
  @spec callback_reply(location(), call_id(), term()) :: term()
  def callback_reply(location, call_id, answer),
    do: of(location).callback_reply(location, call_id, answer)

  @doc false
  # `:base` travels as the image's id; the image itself goes where the
  # session is built (`ExBashkit.Image`): `{config, image | nil}`.
  @spec base_image(map()) :: {map(), ExBashkit.Image.t() | nil}
  def base_image(%{base: %ExBashkit.Image{id: id} = image} = config),
    do: {%{config | base: id}, image}

  def base_image(config), do: {config, nil}

  defp of(:in_node), do: InNode
  defp of({:process, _name, _sid}), do: InWorker

  defp of_isolation(:in_node), do: InNode
  defp of_isolation(:process), do: InWorker
end
