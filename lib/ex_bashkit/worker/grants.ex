defmodule ExBashkit.Worker.Grants do
  @moduledoc false
  # The host files a worker OS process may open: one grant per host mount
  # of its sessions, `{host_path, writable}`, and the file of each base
  # image they are over (read only), given to the process on
  # its command line (`--grant-read`, `--grant-write`) and enforced there by
  # Landlock (`native/ex_bashkit/src/worker/confine/landlock.rs`) before its
  # first frame. A running process can only be narrowed, never widened: a
  # session or mount that needs a grant the process lacks moves the
  # process's sessions to a new one started with it (`ExBashkit.Worker`,
  # "Grants").

  @typedoc "A host directory and whether it may be written."
  @type grant :: {Path.t(), boolean()}
  @type t :: MapSet.t(grant())

  @doc false
  # The grants `mounts` (native mount specs) need.
  @spec of_mounts([map()]) :: [grant()]
  def of_mounts(mounts), do: for(%{host_path: path, writable: w} <- mounts, do: {path, w})

  @doc false
  # The grants a new session with native configuration `config` needs: its
  # host mounts, and the file of its base image (`ExBashkit.Image.Mapped`).
  @spec of_config(map()) :: [grant()]
  def of_config(config) do
    image =
      case Map.get(config, :base) do
        id when is_binary(id) -> [{ExBashkit.Image.Mapped.path(id), false}]
        _ -> []
      end

    image ++ of_mounts(Map.get(config, :mounts, []))
  end

  @doc false
  # The grants a request to a worker needs: a new session's, or a runtime
  # mount's.
  @spec needed(tuple()) :: [grant()]
  def needed({:new, _sid, config}), do: of_config(config)
  def needed({:mount, _sid, spec}), do: of_mounts([spec])
  def needed(_request), do: []

  @doc false
  # Those of `needed` that `grants` do not cover. A grant covers the same
  # path only (a path below a granted one may be a symlink leading out, and
  # Landlock judges where it leads), writable covering read-only.
  @spec missing(t(), [grant()]) :: [grant()]
  def missing(grants, needed) do
    Enum.reject(needed, fn {path, writable} ->
      MapSet.member?(grants, {path, true}) or
        (not writable and MapSet.member?(grants, {path, false}))
    end)
  end

  @doc false
  # The worker's command-line flags for `grants`.
  @spec args(t()) :: [String.t()]
  def args(grants) do
    grants
    |> Enum.sort()
    |> Enum.flat_map(fn
      {path, true} -> ["--grant-write", path]
      {path, false} -> ["--grant-read", path]
    end)
  end
end
