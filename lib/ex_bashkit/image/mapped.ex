defmodule ExBashkit.Image.Mapped do
  @moduledoc false
  # Images as files worker OS processes map (`native/ex_bashkit/src/image/
  # storage.rs`): each image's canonical tar is written once, under a
  # directory of this VM's own (mode 0700, named by its OS pid), as
  # `<id>.tar`, and every session process over the image maps that file
  # read-only, so they share its pages instead of holding a copy each. The
  # file is a grant of the processes that map it (`ExBashkit.Worker.Grants`):
  # Landlock lets a process read only the images its sessions use.
  #
  # A process of the application: it makes the directory at start, removes
  # those of VMs that are gone (a crashed VM leaves its own), and removes
  # its own when the application stops. Files stay while the VM runs.

  use GenServer

  @prefix "ex_bashkit_images_"

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts, name: __MODULE__)

  @doc false
  # Where the worker processes find image `id`.
  @spec path(String.t()) :: Path.t()
  def path(id), do: Path.join(dir(), id <> ".tar")

  @doc false
  # The file of `image`, written now unless it already is (whole, to a
  # temporary name first, so that no process maps a partial file).
  @spec ensure!(ExBashkit.Image.t()) :: Path.t()
  def ensure!(%ExBashkit.Image{id: id} = image) do
    path = path(id)

    unless File.regular?(path) do
      File.mkdir_p!(dir())
      File.chmod!(dir(), 0o700)
      partial = "#{path}.#{System.unique_integer([:positive])}"
      File.write!(partial, ExBashkit.Image.canonical_tar(image))
      File.rename!(partial, path)
    end

    path
  end

  defp dir, do: Path.join(System.tmp_dir!(), @prefix <> System.pid())

  @impl true
  def init(_opts) do
    Process.flag(:trap_exit, true)
    remove_gone()
    {:ok, nil}
  end

  @impl true
  def terminate(_reason, _state), do: File.rm_rf(dir())

  # Directories of VMs no longer running (where /proc can say so; the start
  # goes on whatever this finds).
  defp remove_gone do
    with true <- File.dir?("/proc/self"),
         tmp when is_binary(tmp) <- System.tmp_dir(),
         {:ok, names} <- File.ls(tmp) do
      for name <- names,
          String.starts_with?(name, @prefix),
          pid = String.replace_prefix(name, @prefix, ""),
          pid != System.pid() and not File.exists?("/proc/#{pid}"),
          do: File.rm_rf(Path.join(tmp, name))
    end

    :ok
  end
end
