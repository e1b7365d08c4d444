defmodule ExBashkit.Session.Mounts do
  @moduledoc false
  # Runtime host mounts (`ExBashkit.Session.mount/4`, `unmount/2`) and the
  # description of a session's grants (`describe/1`, for
  # `ExBashkit.Tool.system_prompt/1`).
  #
  # The argument shapes are checked by the same code as the `:mounts` option
  # (`ExBashkit.Session.Options`); the host-side gate runs in Rust, the same
  # gate `new/1` runs (`native/ex_bashkit/src/session/mounts.rs`).

  alias ExBashkit.{Backend, Request}
  alias ExBashkit.Session.Options

  @doc false
  @spec mount(ExBashkit.Session.t(), Path.t(), Path.t(), ExBashkit.Session.mount_mode()) ::
          :ok | {:error, String.t()}
  def mount(%ExBashkit.Session{} = session, vfs_path, host_path, mode) do
    [spec] = Options.parse!(mounts: [{vfs_path, host_path, mode}]).native.mounts
    Request.run(session, :mount, [spec], "mount/4")
  end

  @doc false
  @spec unmount(ExBashkit.Session.t(), Path.t()) :: :ok | {:error, String.t()}
  def unmount(%ExBashkit.Session{} = session, vfs_path) do
    # Checked as `:mounts` checks a mount point: written in normal form.
    [%{vfs_path: vfs}] = Options.parse!(mounts: [{vfs_path, "/", :read_only}]).native.mounts
    Request.run(session, :unmount, [vfs], "unmount/2")
  end

  @doc false
  # `%{mounts: [%{vfs_path:, host_path:, mode:}], virtual_fs: [path],
  # allow_net: [pattern] | :all | nil, credentials: [%{prefix:, placeholder:}],
  # username:, hostname:, limits: map,
  # tools: %{python: [name], git: [name], sqlite: [name], typescript: [name]}}`
  # (tools: the commands each grant gave the session, the command policy
  # applied).
  @spec describe(ExBashkit.Session.t()) :: map()
  def describe(%ExBashkit.Session{resource: resource, location: location}) do
    case Backend.describe(resource, location) do
      {:ok, info} ->
        %{info | limits: info.limits |> Enum.reject(&match?({_, nil}, &1)) |> Map.new()}

      {:error, message} ->
        raise RuntimeError, "cannot describe the session: " <> ExBashkit.Error.text(message)
    end
  end
end
