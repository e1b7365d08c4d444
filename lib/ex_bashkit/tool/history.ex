defmodule ExBashkit.Tool.History do
  @moduledoc """
  The history tools an LLM calls to undo its own work, over an
  `ExBashkit.Session`'s history (`ExBashkit.Session.commit/2` and friends):
  `commit`, `checkout`, `log` and `diff`. They are opt-in:
  `ExBashkit.Tool.definitions(session, history: true)` lists them, and the
  MCP server serves them with `history: true` (`mix ex_bashkit.mcp
  --history`). `ExBashkit.Tool.call/3` runs them.

  Each call returns a JSON-ready map with string keys whose `"error"` is
  `nil` on success and a message otherwise (then the other keys may be
  absent).

    * `commit {message?}` - the state now as a checkpoint:
      `%{"id", "error"}`.
    * `checkout {id}` - files, variables, cwd, functions and aliases as at
      checkpoint `id`: `%{"id", "error"}`.
    * `log {limit?}` - checkpoints, newest first (default 20):
      `%{"commits" => [%{"id", "message", "at", "parents"}], "error"}`.
    * `diff {from, to?}` - paths created, modified and deleted from
      checkpoint `from` to `to` (default: now):
      `%{"created", "modified", "deleted", "error"}`.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> ExBashkit.Tool.call(session, "bash", %{"commands" => "echo v1 > /f"})["exit_code"]
      0
      iex> %{"id" => id, "error" => nil} = ExBashkit.Tool.call(session, "commit", %{"message" => "v1"})
      iex> ExBashkit.Tool.call(session, "bash", %{"commands" => "echo v2 > /f"})["exit_code"]
      0
      iex> ExBashkit.Tool.call(session, "diff", %{"from" => id})["modified"]
      ["/f"]
      iex> ExBashkit.Tool.call(session, "checkout", %{"id" => id})["error"]
      nil
      iex> ExBashkit.Tool.call(session, "read_file", %{"path" => "/f"})["content"]
      "v1\\n"
  """

  import ExBashkit.Tool.Input, only: [string!: 2, optional_string!: 2, optional_pos_integer!: 2]

  alias ExBashkit.Session

  @default_log 20

  @id %{"type" => "string", "description" => "A checkpoint id, from commit or log"}

  @definitions [
    %{
      name: "commit",
      description:
        "Save the sandbox's current state (files, variables, working directory, functions) " <>
          "as a checkpoint you can come back to with checkout. Returns its id. Commit before " <>
          "a risky change.",
      input_schema: %{
        "type" => "object",
        "properties" => %{
          "message" => %{"type" => "string", "description" => "What this checkpoint is"}
        },
        "additionalProperties" => false
      }
    },
    %{
      name: "checkout",
      description:
        "Put the sandbox back in the state of a checkpoint: files, variables, working " <>
          "directory and functions as they were then. Commit first to keep the state you " <>
          "leave reachable.",
      input_schema: %{
        "type" => "object",
        "properties" => %{"id" => @id},
        "required" => ["id"],
        "additionalProperties" => false
      }
    },
    %{
      name: "log",
      description: "List the checkpoints, newest first: id, message, time and parents.",
      input_schema: %{
        "type" => "object",
        "properties" => %{
          "limit" => %{
            "type" => "integer",
            "minimum" => 1,
            "description" => "At most this many (default #{@default_log})"
          }
        },
        "additionalProperties" => false
      }
    },
    %{
      name: "diff",
      description:
        "The files created, modified and deleted between a checkpoint and now, or another " <>
          "checkpoint.",
      input_schema: %{
        "type" => "object",
        "properties" => %{
          "from" => @id,
          "to" => %{"type" => "string", "description" => "A later checkpoint (default: now)"}
        },
        "required" => ["from"],
        "additionalProperties" => false
      }
    }
  ]

  @names Enum.map(@definitions, & &1.name)

  @doc """
  The history tools' definitions: `%{name:, description:, input_schema:}`,
  in the shape of `ExBashkit.Tool.definition/0`.

  ## Examples

      iex> Enum.map(ExBashkit.Tool.History.definitions(), & &1.name)
      ["commit", "checkout", "log", "diff"]
  """
  @spec definitions() :: [%{name: String.t(), description: String.t(), input_schema: map()}]
  def definitions, do: @definitions

  @doc "Whether `name` is one of these tools."
  @spec tool?(term()) :: boolean()
  def tool?(name), do: name in @names

  @doc """
  Run history tool `name` on `session` with `input` (a map, string or atom
  keys).
  """
  @spec call(Session.t(), String.t(), term()) :: map()
  def call(session, name, input) when name in @names and is_map(input) do
    run(session, name, input)
  rescue
    # The session's history functions refuse a malformed id so.
    e in ArgumentError -> failure("invalid input: " <> Exception.message(e))
  catch
    {:invalid, message} -> failure("invalid input: " <> message)
  end

  def call(_session, name, input) when name in @names,
    do: failure("invalid input: the arguments must be an object, got: #{inspect(input)}")

  def call(_session, name, _input), do: failure("unknown tool: #{inspect(name)}")

  defp run(session, "commit", input) do
    meta =
      case optional_string!(input, "message") do
        nil -> %{}
        message -> %{"message" => message}
      end

    case Session.commit(session, meta) do
      {:ok, id} -> %{"id" => id, "error" => nil}
      {:error, message} -> failure(message)
    end
  end

  defp run(session, "checkout", input) do
    id = string!(input, "id")

    case Session.checkout(session, id) do
      :ok -> %{"id" => id, "error" => nil}
      {:error, message} -> failure(message)
    end
  end

  defp run(session, "log", input) do
    limit = optional_pos_integer!(input, "limit") || @default_log

    case Session.log(session, limit: limit) do
      {:ok, entries} -> %{"commits" => Enum.map(entries, &entry/1), "error" => nil}
      {:error, message} -> failure(message)
    end
  end

  defp run(session, "diff", input) do
    from = string!(input, "from")
    to = optional_string!(input, "to") || :current

    case Session.diff(session, from, to) do
      {:ok, diff} ->
        %{
          "created" => diff.created,
          "modified" => diff.modified,
          "deleted" => diff.deleted,
          "error" => nil
        }

      {:error, message} ->
        failure(message)
    end
  end

  defp entry(%{id: id, parents: parents, meta: meta, at: at}) do
    %{
      "id" => id,
      "message" => Map.get(meta, "message"),
      "at" => at && DateTime.to_iso8601(at),
      "parents" => parents
    }
  end

  defp failure(message), do: %{"error" => message}
end
