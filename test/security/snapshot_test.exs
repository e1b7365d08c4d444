defmodule ExBashkit.Security.SnapshotTest do
  # Snapshots cross trust boundaries (storage, network). What must hold:
  # a keyed snapshot cannot be forged or restored without its key; a restore
  # cannot lift the limits or grant the capabilities of the session it lands
  # in; it never writes through host mounts; and snapshots carry nothing of
  # the host.
  use ExUnit.Case, async: true

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.Health

  # See restore_property_test.exs: apply/3 keeps pre-merge builds warning-free.
  defp snapshot(s, opts \\ []), do: apply(Session, :snapshot, [s, opts])
  defp restore(s, bytes, opts \\ []), do: apply(Session, :restore, [s, bytes, opts])

  defp state_session do
    s = Session.new(files: %{"/data/f" => "from-snapshot"})
    {:ok, %Result{exit_code: 0}} = Session.exec(s, "export X=from-snapshot; f() { echo fn; }")
    s
  end

  test "a keyed snapshot rejects a wrong key, a missing key, and re-digested tampering" do
    {:ok, keyed} = snapshot(state_session(), key: "the-key")
    {:ok, plain} = snapshot(state_session())

    assert {:error, _} = restore(Session.new(), keyed, key: "wrong-key")
    assert {:error, _} = restore(Session.new(), keyed)
    assert {:error, _} = restore(Session.new(), plain, key: "the-key")

    # An attacker without the key flips a byte of the body and recomputes
    # the public (unkeyed) digest: SHA-256("BKSNAP01" <> body).
    <<_digest::binary-size(32), body::binary>> = keyed
    at = div(byte_size(body), 2)
    <<pre::binary-size(at), b, post::binary>> = body
    forged_body = pre <> <<Bitwise.bxor(b, 1)>> <> post
    forged = :crypto.hash(:sha256, "BKSNAP01" <> forged_body) <> forged_body

    assert {:error, _} = restore(Session.new(), forged, key: "the-key")
    assert {:error, _} = restore(Session.new(), forged)
  end

  test "a restore cannot lift the limits of the session it lands in" do
    {:ok, bytes} = snapshot(Session.new(limits: [max_commands: 1_000_000]))
    strict = Session.new(limits: [max_commands: 5])
    {:ok, restored} = restore(strict, bytes)

    assert {:error, %ExBashkit.Error{message: message, limit: :max_commands}} =
             Session.run(restored, "for i in 1 2 3 4 5 6 7 8 9; do :; done")

    assert message =~ "max_commands"
  end

  test "a restore cannot grant network access" do
    {:ok, bytes} = snapshot(Session.new(allow_net: :all, block_private_ips: false))
    {:ok, restored} = restore(Session.new(), bytes)

    {:ok, %Result{stdout: out, stderr: err}} =
      Session.exec(restored, "curl -s http://127.0.0.1:9/")

    # The 404 principle: a host outside the allowlist reads as unknown.
    assert out <> err =~ ~r/Could not resolve host/
  end

  test "snapshots carry nothing of the host environment" do
    secret = "snap-secret-#{System.unique_integer([:positive])}"
    name = "EXBASHKIT_SNAP_#{System.unique_integer([:positive])}"
    System.put_env(name, secret)

    try do
      {:ok, bytes} = snapshot(state_session())
      refute bytes =~ secret
      refute bytes =~ name
    after
      System.delete_env(name)
    end
  end

  test "a legacy v1 JSON snapshot is refused, forged names and cwd and all; nothing changes" do
    # bashkit reads the v1 format without a capability check or any name
    # validation; its unkeyed digest is public, so anyone can make one.
    json =
      ~S|{"version":1,"shell":{"env":{"A B":"1","$(id)":"2","X=Y":"3","A\nB":"4"},| <>
        ~S|"variables":{"A B":"1"},"arrays":{},"assoc_arrays":{},"cwd":"rel/../..",| <>
        ~S|"last_exit_code":0,"aliases":{},"traps":{}},"vfs":null,| <>
        ~S|"session_commands":0,"session_exec_calls":0}|

    forged = :crypto.hash(:sha256, "BKSNAP01" <> json) <> json
    s = state_session()
    assert {:error, message} = restore(s, forged)
    assert message =~ "legacy"
    keyed = :crypto.mac(:hmac, :sha256, "k", json) <> json
    assert {:error, _} = restore(s, keyed, key: "k")

    assert {:ok, %Result{stdout: "from-snapshot\n/\n"}} = Session.exec(s, "echo $X; pwd")
  end

  test "huge random input is rejected quickly and the node stays healthy" do
    s = state_session()
    junk = :crypto.strong_rand_bytes(50_000_000)
    assert {:error, _} = restore(s, junk)
    assert {:error, _} = restore(s, junk, key: "k")
    assert {:ok, %Result{stdout: "from-snapshot\n"}} = Session.exec(s, "echo $X")
    Health.assert_healthy!()
  end

  describe "with host mounts" do
    # (A describetag replaces the moduletag of the same name: check both.)

    setup do
      dir =
        Path.join(System.tmp_dir!(), "ex_bashkit_snapmount_#{System.unique_integer([:positive])}")

      File.mkdir_p!(dir)
      File.write!(Path.join(dir, "host.txt"), "host-original")
      on_exit(fn -> File.rm_rf!(dir) end)
      %{dir: dir}
    end

    test "a restore never writes through a host mount, read-only or read-write", %{dir: dir} do
      # The snapshot has files at the same path the mount will occupy.
      source = Session.new(files: %{"/data/host.txt" => "from-snapshot", "/data/planted" => "x"})
      {:ok, bytes} = snapshot(source)

      for mode <- [:read_only, :read_write] do
        target = Session.new(mounts: [{"/data", dir, mode}])
        restore(target, bytes)
        assert File.ls!(dir) == ["host.txt"]
        assert File.read!(Path.join(dir, "host.txt")) == "host-original"
      end
    end
  end
end
