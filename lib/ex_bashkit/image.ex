defmodule ExBashkit.Image do
  @moduledoc """
  A shared base image: an immutable filesystem built once, which any number
  of sessions mount copy-on-write with `ExBashkit.Session.new(base: image)`.

      {:ok, image} = ExBashkit.Image.build(files: %{"/app/main.sh" => "echo hi"})
      a = ExBashkit.Session.new(base: image)
      b = ExBashkit.Session.new(base: image)
      {:ok, _} = ExBashkit.Session.exec(a, "rm /app/main.sh")
      {:ok, %{stdout: "echo hi"}} = ExBashkit.Session.exec(b, "cat /app/main.sh")

  Reads see the image; writes and deletes stay in the session's own layer;
  other sessions are unaffected; `ExBashkit.Session.reset/1` returns to the
  image. A snapshot of such a session holds only its own layer plus the
  image's `id` (and the image paths it deleted), so it restores only into a
  session built over the same image (same content: the id is the SHA-256 of
  the image's canonical tar, so two builds of the same files are one image).

  The image counts against every session's filesystem limits (100 MB,
  10 000 files and 10 000 directories by default): a 50 MB image leaves a
  session 50 MB of its own. File modification times are not part of an
  image (they read as the time the image was loaded).

  ## Memory and lifetime

  The image's content is held once per place that runs sessions over it:
  once in the node for `isolation: :in_node` sessions (and for building:
  in the default mode, an archive given as `:rootfs` or `:from` is first
  read in a worker OS process, which hands the node the image's canonical
  tar),
  and once in each worker OS process that has a session over it
  (`isolation: :process`): a worker is sent the image (its canonical tar)
  the first time one of its sessions names it, keeps it while any of its
  sessions does, and frees it when the last of them is dropped. In the node,
  the image lives while this struct is referenced (it holds a NIF resource,
  freed by garbage collection) or any in-node session over it is alive;
  sessions keep their image, so dropping the struct early is safe.

  Inside each place, the image is its canonical tar: files' contents stay in
  that one buffer, and a file is copied out the first time any session over
  the image reads it (once, shared by all of them). An image whose every file
  is read so holds up to twice its content.
  """

  alias ExBashkit.{Native, Session}
  alias ExBashkit.Session.Options

  @enforce_keys [:id, :ref, :bytes, :files]
  defstruct [:id, :ref, :bytes, :files]

  @typedoc """
  An image: `id` is its content hash (hex SHA-256), `bytes` and `files`
  what it holds (content bytes; files and symlinks).
  """
  @type t :: %__MODULE__{
          id: String.t(),
          ref: reference(),
          bytes: non_neg_integer(),
          files: non_neg_integer()
        }

  @doc """
  Build an image from any of:

    * `:rootfs` - a tar or tar.gz binary, or `{:file, host_path}` of one
      (the rules of `ExBashkit.Session.new/1`'s `:rootfs`);
    * `:files` - `%{path => content}` like `Session.new/1`'s `:files`, laid
      over the archive (mode `0o644`);
    * `from: session` - the filesystem of a live session, as
      `ExBashkit.Session.export_tar/3` sees it (no mounts, no system files).

  Returns `{:ok, image}`, or `{:error, message}` when the content is refused
  (a bad archive, past the filesystem limits). Malformed options raise
  `ArgumentError`.

      iex> {:ok, image} = ExBashkit.Image.build(files: %{"/etc/motd" => "hello"})
      iex> session = ExBashkit.Session.new(base: image)
      iex> ExBashkit.Session.exec!(session, "cat /etc/motd").stdout
      "hello"
  """
  @spec build(keyword()) :: {:ok, t()} | {:error, String.t()}
  def build(opts) do
    spec = spec!(opts)

    with {:ok, spec} <- from_session(spec),
         {:ok, spec} <- canonical_where_isolated(spec) do
      case Native.image_build(spec) do
        {:ok, {ref, id, bytes, files}} ->
          {:ok, %__MODULE__{id: id, ref: ref, bytes: bytes, files: files}}

        {:error, message} ->
          {:error, message}
      end
    end
  end

  @doc """
  Like `build/1`, but raises `ArgumentError` when the content is refused.
  """
  @spec build!(keyword()) :: t()
  def build!(opts) do
    case build(opts) do
      {:ok, image} -> image
      {:error, message} -> raise ArgumentError, "ExBashkit.Image.build/1: " <> message
    end
  end

  defp spec!(opts) do
    unless is_list(opts) and Enum.all?(opts, &match?({key, _} when is_atom(key), &1)) do
      raise ArgumentError, "ExBashkit.Image.build/1 options must be a keyword list"
    end

    for {key, _} <- opts, key not in [:files, :rootfs, :from] do
      raise ArgumentError,
            "unknown option #{inspect(key)} for ExBashkit.Image.build/1; " <>
              "known options: :files, :rootfs, :from"
    end

    if Keyword.has_key?(opts, :from) and Keyword.has_key?(opts, :rootfs) do
      raise ArgumentError, "ExBashkit.Image.build/1 takes :from or :rootfs, not both"
    end

    from =
      case Keyword.get(opts, :from) do
        nil -> nil
        %Session{} = session -> session
        other -> raise ArgumentError, ":from must be an ExBashkit.Session, got: #{inspect(other)}"
      end

    %{
      rootfs: Options.rootfs!(Keyword.get(opts, :rootfs)),
      files: Options.files!(Keyword.get(opts, :files, [])),
      from: from
    }
  end

  defp from_session(%{from: nil} = spec), do: {:ok, Map.delete(spec, :from)}

  defp from_session(%{from: session} = spec) do
    with {:ok, tar} <- Session.export_tar(session, "/") do
      {:ok, spec |> Map.delete(:from) |> Map.put(:rootfs, tar)}
    end
  end

  # In the default mode an archive is read in a worker OS process, where a
  # hostile one costs the worker only: it answers with the image's canonical
  # tar, which the node then reads in place (every check again, on bytes
  # the worker laid out within the filesystem limits).
  defp canonical_where_isolated(%{rootfs: tar} = spec) when is_binary(tar) do
    if Options.default_isolation() == :process do
      with {:ok, name} <- ExBashkit.WorkerPool.pick_once(),
           pid when is_pid(pid) <- Process.whereis(name) || {:error, "no worker process"},
           {:ok, canonical} <-
             ExBashkit.Worker.call(pid, {:canonical_tar, Map.put(spec, :canonical, false)}) do
        {:ok, %{rootfs: canonical, files: [], canonical: true}}
      end
    else
      {:ok, Map.put(spec, :canonical, false)}
    end
  end

  defp canonical_where_isolated(spec), do: {:ok, Map.put(spec, :canonical, false)}

  @doc false
  # The canonical tar of `image`, which a worker is sent.
  @spec canonical_tar(t()) :: binary()
  def canonical_tar(%__MODULE__{ref: ref}) do
    {:ok, tar} = Native.image_tar(ref)
    tar
  end

  defimpl Inspect do
    def inspect(image, _opts) do
      "#ExBashkit.Image<#{String.slice(image.id, 0, 12)}, #{image.files} files, " <>
        "#{image.bytes} bytes>"
    end
  end
end
