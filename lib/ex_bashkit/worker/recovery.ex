defmodule ExBashkit.Worker.Recovery do
  @moduledoc false
  # The recovery points of a worker's durable sessions (`durable: true`,
  # the default): what `ExBashkit.Worker` rebuilds a session from when its
  # OS process dies (`native/ex_bashkit/src/session/recovery.rs` makes
  # them).
  #
  # A point arrives as a frame ahead of the answer of the call that made
  # it: a commit's objects go to the store, a shell state and the files
  # sent since the last commit stay here, beside the session's
  # configuration; either before the answer goes on, so that the answer is
  # given only once the state it reports is recoverable. A call
  # other than an exec that may change the state (a file written, a
  # restore, a checkout) has its answer held until a point is made for it
  # (`{:recovery_point, ...}`). The points' commits are GC roots while the
  # OS process that made them is gone or rebuilding.

  alias ExBashkit.Session.History

  @typedoc """
  sid => its last point: its last commit of files (nil: the
  configuration's files), the file entries sent since (newest first), the
  shell state since (nil: the commit's), its history's head; or why it has
  none it can be rebuilt from.
  """
  @type points :: %{
          optional(non_neg_integer()) =>
            %{
              fs: String.t() | nil,
              files: [list()],
              shell: binary() | nil,
              head: String.t() | nil
            }
            | {:unrecoverable, String.t()}
        }

  # The calls besides exec that may change a session's state, and the
  # filesystem requests among them.
  @changing_kinds [:restore, :history_checkout]
  @changing_fs [:write, :mkdir, :remove, :rename, :undelete]

  @doc false
  # Whether a session built from `config` (its native configuration) is
  # rebuilt from recovery points after a crash: durable, and not over a
  # base image (whose deletions a commit cannot hold yet).
  @spec recoverable?(map()) :: boolean()
  def recoverable?(config),
    do: Map.get(config, :durable) == true and Map.get(config, :base) == nil

  @doc false
  # Whether the answer of `request` waits for a point.
  @spec changes_state?(tuple()) :: boolean()
  def changes_state?({:fs, _sid, request}) when is_tuple(request) and tuple_size(request) > 0,
    do: elem(request, 0) in @changing_fs

  def changes_state?(request), do: elem(request, 0) in @changing_kinds

  @doc false
  # Record the point of frame `payload` for `sid`, its objects stored.
  @spec put(points(), non_neg_integer(), term()) :: points()
  def put(points, sid, {:commit, fs, head, objects}) when is_binary(fs) and is_list(objects) do
    case History.store_objects(fs, objects) do
      :ok -> Map.put(points, sid, %{fs: fs, files: [], shell: nil, head: head})
      {:error, message} -> Map.put(points, sid, {:unrecoverable, message})
    end
  end

  def put(points, sid, {:shell, bytes, head}) when is_binary(bytes),
    do: update(points, sid, &%{&1 | shell: bytes, head: head})

  def put(points, sid, {:files, entries, bytes, head}) when is_list(entries) and is_binary(bytes),
    do: update(points, sid, &%{&1 | files: [entries | &1.files], shell: bytes, head: head})

  def put(points, sid, {:error, message}) when is_binary(message),
    do: Map.put(points, sid, {:unrecoverable, message})

  def put(points, sid, _malformed),
    do: Map.put(points, sid, {:unrecoverable, "malformed recovery point"})

  @doc false
  # A commit of `sid`'s history moved its head to `id`.
  @spec committed(points(), non_neg_integer(), String.t()) :: points()
  def committed(points, sid, id), do: update(points, sid, &%{&1 | head: id})

  # A point that has none yet is the configuration's; one that could not
  # be stored stays lost until a commit is.
  defp update(points, sid, fun) do
    case Map.get(points, sid, %{fs: nil, files: [], shell: nil, head: nil}) do
      %{} = point -> Map.put(points, sid, fun.(point))
      lost -> Map.put(points, sid, lost)
    end
  end

  @doc false
  # `child` was forked from `parent`: it has its point.
  @spec forked(points(), non_neg_integer(), non_neg_integer()) :: points()
  def forked(points, parent, child) do
    case Map.fetch(points, parent) do
      {:ok, point} -> Map.put(points, child, point)
      :error -> Map.delete(points, child)
    end
  end

  @doc false
  # The commits the points keep: GC roots.
  @spec roots(points()) :: [String.t()]
  def roots(points) do
    for {_sid, %{} = point} <- points,
        id <- [point.fs, point.head],
        id != nil,
        uniq: true,
        do: id
  end

  @doc false
  # The point of a session with none (its state is its configuration's):
  # recovered only when it has mounts to put back (`true`).
  @spec built(boolean()) :: map() | nil
  def built(true), do: %{fs: nil, files: [], shell: nil, head: nil}
  def built(false), do: nil

  @doc false
  # The frame that recovers `sid` (just rebuilt) to `point` and the host
  # `mounts` it had (nil: its configuration's) as request `id`, or an
  # error: the store lost its objects.
  @spec recover_frame(map(), pos_integer(), non_neg_integer(), [map()] | nil) ::
          {:ok, tuple()} | {:error, String.t()}
  def recover_frame(%{fs: fs, shell: shell, head: head} = point, id, sid, mounts) do
    with {:ok, objects} <- History.objects_of(fs) do
      request = %{
        fs: fs,
        files: point.files |> Enum.reverse() |> Enum.concat(),
        shell: shell,
        head: head,
        kept: History.ancestry_of(head),
        mounts: mounts
      }

      {:ok, {:recover, id, sid, request, objects}}
    end
  end
end
