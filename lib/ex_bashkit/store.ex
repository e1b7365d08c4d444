defmodule ExBashkit.Store do
  @moduledoc """
  Where sessions' histories live: a content-addressed object store, shared
  by every session of the node (`ExBashkit.Session.commit/2` and friends).

  An object is `{id, blob, refs}`: `id` is the lowercase hex SHA-256 of its
  content (bashkit's `ObjectId`), `blob` its stored bytes, `refs` the ids of
  the objects it references (a commit its tree, shell state and capability
  fingerprint; a tree its files; a file its chunks; parents are not refs:
  they are history, not content). Two sessions holding the same file store
  it once.

  Choose the implementation in your config; the default is
  `ExBashkit.Store.ETS`:

      config :ex_bashkit, store: ExBashkit.Store.ETS
      config :ex_bashkit, store: {ExBashkit.Store.Disk, dir: "/var/lib/my_app/bashkit"}
      config :ex_bashkit, store: {ExBashkit.Store.Mnesia, nodes: [node() | Node.list()]}

  The application supervises the configured store's process.

  ## What is kept

  Objects nothing reaches any more are freed by `gc/1`, a mark-and-sweep
  whose roots are the commits every live session keeps: its head and its
  last `history_limit/0` commits (`config :ex_bashkit, history_limit: 100`,
  the bound of `ExBashkit.Session.log/2`). A session that is gone keeps
  nothing. `gc/1` runs on its own every `gc_every/0` commits of the node
  (`config :ex_bashkit, gc_every: 50`); call it to collect at once.

  ## Implementing a store

  Every callback takes the options given in the config (`[]` for a bare
  module). `put/2` must be idempotent (the same id always has the same
  content). A store may be shared by nodes (`nodes/1`): `gc/1` then counts
  the sessions of every one of them, and collects nothing if one cannot be
  asked.
  """

  alias ExBashkit.Store.Collector

  @typedoc "An object's id: 64 lowercase hex characters."
  @type id :: String.t()

  @typedoc "An object: its id, stored bytes and the ids it references."
  @type object :: {id(), binary(), [id()]}

  @typedoc "A store: its module and options."
  @type t :: {module(), keyword()}

  @doc "The child spec of the store's process (its table, directory or schema)."
  @callback child_spec(keyword()) :: Supervisor.child_spec()
  @doc "Store `objects` (an object already held is left as it is)."
  @callback put(keyword(), [object()]) :: :ok | {:error, String.t()}
  @doc "The blobs of those of `ids` the store holds."
  @callback get(keyword(), [id()]) :: %{optional(id()) => binary()}
  @doc "The references of those of `ids` the store holds."
  @callback refs(keyword(), [id()]) :: %{optional(id()) => [id()]}
  @doc "Whether the store holds `id`."
  @callback has?(keyword(), id()) :: boolean()
  @doc "Forget `ids`."
  @callback delete(keyword(), [id()]) :: :ok
  @doc "Every id the store holds."
  @callback ids(keyword()) :: [id()]
  @doc "How many objects the store holds, and their bytes."
  @callback size(keyword()) :: %{objects: non_neg_integer(), bytes: non_neg_integer()}
  @doc "The nodes whose sessions share this store (default: this node)."
  @callback nodes(keyword()) :: [node()]
  @optional_callbacks nodes: 1

  @default_history_limit 100
  @default_gc_every 50

  @doc "The configured store (`config :ex_bashkit, store: ...`)."
  @spec configured() :: t()
  def configured do
    case Application.get_env(:ex_bashkit, :store, ExBashkit.Store.ETS) do
      {module, opts} when is_atom(module) and is_list(opts) ->
        {module, opts}

      module when is_atom(module) ->
        {module, []}

      other ->
        raise ArgumentError,
              "config :ex_bashkit, :store must be a module or {module, opts}, got: #{inspect(other)}"
    end
  end

  @doc "How many commits each session keeps (`config :ex_bashkit, history_limit: n`, default #{@default_history_limit})."
  @spec history_limit() :: pos_integer()
  def history_limit, do: positive(:history_limit, @default_history_limit)

  @doc "After how many commits of the node `gc/1` runs on its own (default #{@default_gc_every})."
  @spec gc_every() :: pos_integer()
  def gc_every, do: positive(:gc_every, @default_gc_every)

  defp positive(key, default) do
    case Application.get_env(:ex_bashkit, key, default) do
      n when is_integer(n) and n > 0 ->
        n

      other ->
        raise ArgumentError,
              "config :ex_bashkit, #{inspect(key)} must be a positive integer, got: #{inspect(other)}"
    end
  end

  @doc false
  # The application's child for the configured store.
  @spec child_spec(term()) :: Supervisor.child_spec()
  def child_spec(_arg) do
    {module, opts} = configured()
    module.child_spec(opts)
  end

  @doc "Store `objects` in `store`."
  @spec put([object()], t()) :: :ok | {:error, String.t()}
  def put(objects, {module, opts} \\ configured()), do: module.put(opts, objects)

  @doc "The blobs of those of `ids` that `store` holds."
  @spec get([id()], t()) :: %{optional(id()) => binary()}
  def get(ids, {module, opts} \\ configured()), do: module.get(opts, ids)

  @doc "The references of those of `ids` that `store` holds."
  @spec refs([id()], t()) :: %{optional(id()) => [id()]}
  def refs(ids, {module, opts} \\ configured()), do: module.refs(opts, ids)

  @doc "Whether `store` holds `id`."
  @spec has?(id(), t()) :: boolean()
  def has?(id, {module, opts} \\ configured()), do: module.has?(opts, id)

  @doc "How many objects `store` holds, and their bytes."
  @spec size(t()) :: %{objects: non_neg_integer(), bytes: non_neg_integer()}
  def size({module, opts} \\ configured()), do: module.size(opts)

  @doc """
  Free what no live session keeps; returns `{:ok, freed}`, the number of
  objects deleted (0 when a commit was under way, or a node sharing the
  store could not be asked: nothing is freed on doubt).
  """
  @spec gc(t()) :: {:ok, non_neg_integer()}
  def gc(store \\ configured()) do
    if store == configured() and Process.whereis(Collector),
      do: Collector.gc(),
      else: collect(store)
  end

  @doc false
  # The mark-and-sweep itself. Ids are listed before the roots are read:
  # an object stored after the listing is never swept. `quiet?`, asked
  # right after the listing, says no commit that could have stored objects
  # before it is still under way (`ExBashkit.Store.Collector`); when it
  # says otherwise nothing is freed. A root the store does not hold (a
  # commit of another store, or one whose objects could not be stored)
  # reaches nothing.
  @spec collect(t(), (() -> boolean())) :: {:ok, non_neg_integer()}
  def collect({module, opts} = store, quiet? \\ fn -> true end) do
    before = module.ids(opts)

    with true <- quiet?.(),
         {:ok, roots} <- roots(store) do
      marked = walk(roots, store, MapSet.new())
      garbage = Enum.reject(before, &MapSet.member?(marked, &1))
      module.delete(opts, garbage)
      {:ok, length(garbage)}
    else
      _ -> {:ok, 0}
    end
  end

  defp roots({module, opts}) do
    nodes = if function_exported?(module, :nodes, 1), do: module.nodes(opts), else: [node()]

    results = :erpc.multicall(nodes, ExBashkit.Backend, :history_roots, [], 30_000)

    if Enum.all?(results, &match?({:ok, list} when is_list(list), &1)),
      do: {:ok, results |> Enum.flat_map(fn {:ok, list} -> list end) |> Enum.uniq()},
      else: :skip
  end

  defp walk([], _store, marked), do: marked

  defp walk(ids, store, marked) do
    fresh = Enum.reject(ids, &MapSet.member?(marked, &1)) |> Enum.uniq()
    marked = Enum.reduce(fresh, marked, &MapSet.put(&2, &1))
    next = refs(fresh, store) |> Map.values() |> List.flatten()
    walk(next, store, marked)
  end
end
