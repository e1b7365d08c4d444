defmodule ExBashkit.Security.ContainedCommandsTest do
  # Issue 22, item 12, for bashkit's own commands: a filesystem failure of
  # `tar -x`, `gzip`, `bzip2`, `split`, `zip`, `unzip`, `patch` (a read-only
  # mount, a missing directory, a quota) is that command's non-zero exit and
  # stderr, as in bash; the exec goes on and keeps its earlier output
  # (`commands/nested.rs`). Against real host directories; runs in both isolation
  # modes (scripts/test runs the suite twice).
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.Session
  alias ExBashkit.Test.HostDir

  # An archive and inputs in the session's own filesystem.
  @setup """
  mkdir -p /src/d && echo hi > /src/d/f && echo x > /in.txt
  tar -cf /a.tar -C /src d
  cp /in.txt /g.txt && gzip /g.txt
  cp /in.txt /b.txt && bzip2 /b.txt
  cd /src && zip -qr /a.zip d && cd /
  """

  defp session(opts \\ []) do
    host = HostDir.create!(%{"ro/keep.txt" => "keep\n", "rw/.keep" => ""})
    ro = Path.join(host, "ro")
    rw = Path.join(host, "rw")
    s = Session.new([mounts: [{"/ro", ro, :read_only}, {"/rw", rw, :read_write}]] ++ opts)
    run!(s, @setup)
    %{s: s, ro: ro, rw: rw}
  end

  test "tar -x into a read-only mount fails only tar" do
    %{s: s, ro: ro} = session()
    before = HostDir.snapshot(ro)
    r = run!(s, "echo before; tar -xf /a.tar -C /ro; echo \"after $?\"")
    assert r.stdout =~ ~r/\Abefore\nafter [1-9]\d*\n\z/, inspect(r)
    assert r.stderr =~ ~r/^tar: .*read/m
    assert r.exit_code == 0
    assert HostDir.snapshot(ro) == before
  end

  test "tar -x into a read-write mount writes the host directory" do
    %{s: s, rw: rw} = session()
    assert out(s, "echo before; tar -xf /a.tar -C /rw; echo \"after $?\"") == "before\nafter 0\n"
    assert File.read!(Path.join(rw, "d/f")) == "hi\n"
  end

  test "every contained command, into a read-only mount and a missing directory" do
    %{s: s, ro: ro} = session()
    before = HostDir.snapshot(ro)

    # /nowhere: a missing directory; /in.txt/sub: a directory under a file.
    # (bashkit's tar creates its -C directory, like `mkdir -p`: no failure.)
    for dir <- ["/ro", "/nowhere", "/in.txt/sub"],
        command <- [
          "tar -xf /a.tar -C #{dir}",
          "gzip #{dir}/keep.txt",
          "bzip2 #{dir}/keep.txt",
          "split -l 1 /in.txt #{dir}/part",
          "zip -q #{dir}/z.zip /in.txt",
          "unzip -q -o /a.zip -d #{dir}"
        ],
        command != "tar -xf /a.tar -C /nowhere" do
      r = run!(s, "echo before; #{command}; echo \"after $?\"")
      assert r.stdout =~ ~r/\Abefore\n(.*\n)*after [1-9]\d*\n\z/, "#{command}: #{inspect(r)}"
      assert r.stderr != "", command
    end

    assert HostDir.snapshot(ro) == before
  end

  test "a quota: the command fails, the exec goes on" do
    s = Session.new(limits: [max_fs_bytes: 200_000])
    run!(s, "head -c 120000 /dev/zero > /big")
    r = run!(s, "echo before; tar -cf /again.tar /big; echo \"after $?\"")
    assert r.stdout =~ ~r/\Abefore\nafter [1-9]\d*\n\z/, inspect(r)
    assert r.stderr =~ "tar"
  end

  test "normal results pass through: output, status, stdin, cwd, env" do
    %{s: s} = session()

    assert out(s, "cd /src && tar -tf /a.tar") =~ "d/f"
    assert out(s, "echo hello | gzip | gunzip") == "hello\n"
    assert out(s, "cd /tmp && export N=3 && seq $N | split -l 1 - p && cat pab") == "2\n"
    assert run!(s, "tar -xf /nosuch.tar; echo $?").stdout =~ ~r/^[1-9]\d*\n$/
  end

  test "the command policy still governs them" do
    s = Session.new(commands: [deny: ["tar"]])
    r = run!(s, "tar -cf /a.tar /etc/hostname; echo $?")
    assert r.stdout == "127\n"
    assert r.stderr =~ "tar: command not found"
  end
end
