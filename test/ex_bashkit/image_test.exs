defmodule ExBashkit.ImageTest do
  # `ExBashkit.Image` and `Session.new(base: image)` (issue 18, "Shared base
  # images"). Runs in both isolation modes.
  use ExUnit.Case, async: true

  alias ExBashkit.{Image, Session}
  alias ExBashkit.Test.TarWriter

  defp sh!(session, script), do: Session.exec!(session, script).stdout

  # Prints the arguments that exist (none, when all are gone).
  @present "present() { for f in \"$@\"; do if [ -e \"$f\" ] || [ -L \"$f\" ]; then echo \"$f\"; fi; done; }; present"

  setup do
    {:ok, image} =
      Image.build(
        rootfs:
          TarWriter.tar([
            {:file, "app/bin/run", "#!/bin/sh\necho running\n", 0o755},
            {:file, "app/data/seed.txt", "seed"},
            {:dir, "app/cache"},
            {:symlink, "app/current", "/app/bin/run"}
          ]),
        files: %{"/etc/motd" => "welcome"}
      )

    %{image: image}
  end

  @tag :process_only
  test "session processes over one image map one file of it; one not over it does not",
       %{image: image} do
    a = Session.new(base: image)
    b = Session.new(base: image)
    plain = Session.new()
    assert sh!(a, "cat /app/data/seed.txt") == "seed"
    assert sh!(b, "cat /app/data/seed.txt") == "seed"

    [pid_a, pid_b, pid_plain] = for s <- [a, b, plain], do: Session.info(s).os_pid
    assert pid_a != pid_b
    file = ExBashkit.Image.Mapped.path(image.id)
    assert File.regular?(file)
    assert File.read!("/proc/#{pid_a}/maps") =~ file
    assert File.read!("/proc/#{pid_b}/maps") =~ file
    refute File.read!("/proc/#{pid_plain}/maps") =~ file
    # Held until here: a session collected earlier stops its process.
    for s <- [a, b, plain], do: assert(Session.exec!(s, "true").exit_code == 0)
  end

  test "an image is identified by its content", %{image: image} do
    assert image.id =~ ~r/^[0-9a-f]{64}$/
    assert image.files == 4

    {:ok, again} =
      Image.build(
        rootfs:
          TarWriter.tar([
            {:file, "app/bin/run", "#!/bin/sh\necho running\n", 0o755},
            {:file, "app/data/seed.txt", "seed"},
            {:dir, "app/cache"},
            {:symlink, "app/current", "/app/bin/run"}
          ]),
        files: %{"/etc/motd" => "welcome"}
      )

    assert again.id == image.id
    {:ok, other} = Image.build(files: %{"/etc/motd" => "other"})
    assert other.id != image.id
  end

  test "reads see the image; writes and deletes stay in the session", %{image: image} do
    a = Session.new(base: image)
    b = Session.new(base: image)

    assert sh!(a, "cat /app/data/seed.txt /etc/motd; stat -c %a /app/bin/run") ==
             "seedwelcome755\n"

    assert sh!(a, "readlink /app/current; ls /app/cache | wc -l") == "/app/bin/run\n0\n"

    sh!(a, """
    echo changed > /app/data/seed.txt
    rm /etc/motd
    rm -r /app/bin
    echo new > /app/cache/new.txt
    chmod 700 /app/cache
    """)

    assert sh!(a, "cat /app/data/seed.txt; #{@present} /etc/motd /app/bin") == "changed\n"

    # b, and a fresh session, see the image as it was.
    for other <- [b, Session.new(base: image)] do
      assert sh!(other, "cat /app/data/seed.txt /etc/motd; ls /app/cache | wc -l") ==
               "seedwelcome0\n"

      assert sh!(other, "/app/bin/run; stat -c %a /app/cache") == "running\n755\n"
    end
  end

  test "a deleted image directory recreated shows none of its old files", %{image: image} do
    a = Session.new(base: image)
    sh!(a, "rm -r /app/data && mkdir /app/data && echo x > /app/data/y")
    assert sh!(a, "ls /app/data") == "y\n"
  end

  test "reset/1 returns to the image", %{image: image} do
    a = Session.new(base: image, files: %{"/own.txt" => "mine"})
    sh!(a, "rm -r /app; echo gone > /etc/motd; rm /own.txt")
    :ok = Session.reset(a)

    assert sh!(a, "cat /etc/motd /own.txt; echo; ls /app") ==
             "welcomemine\nbin\ncache\ncurrent\ndata\n"
  end

  test "snapshot/restore carries the session's layer and the image's identity", %{image: image} do
    a = Session.new(base: image)

    sh!(a, """
    x=42
    echo changed > /app/data/seed.txt
    rm /etc/motd
    rm -r /app/bin
    mkdir -p /work && echo w > /work/w.txt
    """)

    {:ok, bytes} = Session.snapshot(a)
    {:ok, keyed} = Session.snapshot(a, key: "k")

    # Into another session over the same image, even one that changed things
    # (its own deletions must not survive the restore).
    b = Session.new(base: image)
    sh!(b, "rm /app/data/seed.txt; echo b > /b.txt")
    assert {:ok, b} = Session.restore(b, bytes)

    assert sh!(
             b,
             "echo $x; cat /app/data/seed.txt /work/w.txt; #{@present} /etc/motd /app/bin /b.txt"
           ) ==
             "42\nchanged\nw\n"

    assert sh!(b, "cat /app/current >/dev/null 2>&1; echo $?") == "1\n"

    c = Session.new(base: image)
    assert {:ok, c} = Session.restore(c, keyed, key: "k")
    assert sh!(c, "echo $x; #{@present} /etc/motd") == "42\n"
    assert {:error, _} = Session.restore(Session.new(base: image), keyed, key: "wrong")

    # The snapshot holds the session's layer, not the image.
    assert byte_size(bytes) < 64 * 1024
  end

  test "restore needs the same image: a clear error, and the session is unchanged", %{
    image: image
  } do
    {:ok, bytes} = Session.snapshot(Session.new(base: image))

    plain = Session.new(files: %{"/keep" => "k"})
    assert {:error, message} = Session.restore(plain, bytes)
    assert message =~ "base image #{image.id}"
    assert Session.read_file(plain, "/keep") == {:ok, "k"}

    {:ok, other_image} = Image.build(files: %{"/other" => "o"})
    other = Session.new(base: other_image)
    assert {:error, message} = Session.restore(other, bytes)
    assert message =~ image.id
    assert sh!(other, "cat /other") == "o"

    # And the other way: a plain snapshot into a session over an image.
    {:ok, plain_bytes} = Session.snapshot(plain)
    over = Session.new(base: image)
    assert {:error, message} = Session.restore(over, plain_bytes)
    assert message =~ "without a base image"
    assert sh!(over, "cat /etc/motd") == "welcome"
  end

  test "an image from a session, and export_tar of a session over an image", %{image: image} do
    a = Session.new(base: image)
    sh!(a, "rm /etc/motd; echo added > /app/added.txt; mkdir /app/emptydir")
    {:ok, derived} = Image.build(from: a)
    d = Session.new(base: derived)

    assert sh!(d, "cat /app/added.txt; #{@present} /etc/motd; test -d /app/emptydir && echo dir") ==
             "added\ndir\n"

    assert sh!(d, "/app/current") == "running\n"

    {:ok, tar} = Session.export_tar(a, "/app")
    copy = Session.new(rootfs: tar)
    assert sh!(copy, "cat /added.txt /data/seed.txt") == "added\nseed"
  end

  test "the image counts against the session's filesystem limits" do
    chunk = :binary.copy("z", 10_000_000)
    files = for i <- 1..9, into: %{}, do: {"/big/#{i}", chunk}
    {:ok, image} = Image.build(files: files)
    assert image.bytes == 90_000_000
    s = Session.new(base: image)
    # 90 MB of the 100 MB are the image's: a 9 MB write fits, a second not.
    assert sh!(s, "head -c 9000000 /big/1 > /mine1; echo $?") == "0\n"
    result = Session.exec!(s, "head -c 9000000 /big/1 > /mine2; echo $?")
    refute result.stdout == "0\n"
  end

  test "bad options raise; bad content is an error" do
    assert_raise ArgumentError, fn -> Image.build(bogus: 1) end
    assert_raise ArgumentError, fn -> Image.build(from: :not_a_session) end
    assert_raise ArgumentError, fn -> Session.new(base: "not an image") end
    assert {:error, message} = Image.build(rootfs: TarWriter.tar([{:file, "/abs", "x"}]))
    assert message =~ "absolute"
    assert_raise ArgumentError, fn -> Image.build!(rootfs: "garbage") end
  end

  test "in the default mode the archive is read in a worker OS process, not the node" do
    tar = TarWriter.tar([{:file, "etc/motd", "from the archive"}])
    # Calls to ExBashkit.Worker.call from this process, collected by a
    # tracer of their own (a process cannot trace itself).
    tracer = spawn_link(fn -> collect([]) end)
    :erlang.trace_pattern({ExBashkit.Worker, :call, :_}, true, [:local])
    :erlang.trace(self(), true, [:call, {:tracer, tracer}])

    try do
      assert {:ok, image} = Image.build(rootfs: tar)
      s = Session.new(base: image)
      assert {:ok, "from the archive"} = Session.read_file(s, "/etc/motd")
    after
      :erlang.trace(self(), false, [:call])
    end

    # Trace messages are sent asynchronously: wait until all have arrived.
    ref = :erlang.trace_delivered(self())
    assert_receive {:trace_delivered, _, ^ref}
    send(tracer, {:calls, self()})
    assert_receive {:calls, calls}
    asked = for {_, :call, [_, {:canonical_tar, _} | _]} <- calls, do: :asked

    case ExBashkit.Session.Options.default_isolation() do
      :process -> assert asked != []
      :in_node -> assert asked == []
    end
  end

  defp collect(calls) do
    receive do
      {:trace, _, :call, mfa} -> collect([mfa | calls])
      {:calls, to} -> send(to, {:calls, calls})
    end
  end

  test "an error quotes a short prefix of what it refuses: a 100 MB member name" do
    name = :binary.copy("n", 100 * 1024 * 1024)
    gz = :zlib.gzip(TarWriter.tar([{:long_name, name, "x"}]))
    assert {:error, message} = Image.build(rootfs: gz)
    assert byte_size(message) < 2_048
    error = assert_raise ArgumentError, fn -> Image.build!(rootfs: gz) end
    assert byte_size(error.message) < 2_048

    # Past the path limit (no header cap needed): quoted short too.
    long = String.duplicate("d/", 20_000) <> "f"
    assert {:error, message} = Image.build(rootfs: TarWriter.tar([{:long_name, long, "x"}]))
    assert byte_size(message) < 2_048
  end

  test "file contents come from the image's archive, byte for byte, whoever reads first" do
    # An image keeps its files' contents inside its canonical tar and a file
    # is copied out on its first read (`image.rs`): sizes before any read,
    # binary and large contents, first reads from many sessions at once, and
    # writes that start from the image's bytes must all see the same bytes.
    big = :crypto.strong_rand_bytes(1_500_000)
    binary = <<0, 255, 10, 13, 0>> <> String.duplicate("\n", 600)
    files = for i <- 1..40, into: %{}, do: {"/many/f#{i}", "content #{i}\n"}

    {:ok, image} =
      Image.build(
        files: Map.merge(files, %{"/big.bin" => big, "/bin.dat" => binary, "/log" => "a\n"})
      )

    first = Session.new(base: image)
    assert sh!(first, "stat -c %s /big.bin /bin.dat /many/f7") == "1500000\n605\n10\n"

    sessions = for _ <- 1..8, do: Session.new(base: image)

    reads =
      sessions
      |> Enum.map(&Task.async(fn -> Session.read_file(&1, "/big.bin") end))
      |> Task.await_many(30_000)

    assert Enum.all?(reads, &(&1 == {:ok, big}))
    assert {:ok, ^binary} = Session.read_file(first, "/bin.dat")

    for i <- [1, 17, 40] do
      assert sh!(Enum.at(sessions, rem(i, 8)), "cat /many/f#{i}") == "content #{i}\n"
    end

    # Appending starts from the image's bytes and stays in that session.
    assert sh!(first, "echo b >> /log; cat /log") == "a\nb\n"
    assert sh!(hd(sessions), "cat /log") == "a\n"
    assert {:ok, tar} = Session.export_tar(first, "/many")
    assert byte_size(tar) > 40 * 512
  end

  test "sessions keep their image after the handle is gone" do
    session =
      (fn ->
         {:ok, image} = Image.build(files: %{"/only/here" => "still"})
         Session.new(base: image)
       end).()

    :erlang.garbage_collect()
    assert sh!(session, "cat /only/here") == "still"
    :ok = Session.reset(session)
    assert sh!(session, "cat /only/here") == "still"
  end
end
