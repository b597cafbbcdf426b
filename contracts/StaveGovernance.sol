// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// Stave's consortium governance, at 0x0000000000000000000000000000000000001000 from the
/// genesis on (docs/governance.md): the committee that decides, the validator set (ed25519
/// consensus keys), the non-validator nodes admitted to the P2P network (node ids), and
/// the permissions every node enforces on transactions (who may deploy, who may send,
/// which accounts and contracts are frozen).
/// A change is a proposal that committee members vote on with ordinary transactions; it
/// applies when the weight of its votes reaches the threshold, and lapses after
/// `proposalLifetime` blocks.
///
/// The genesis writes the state directly (no constructor runs): the node reads it by the
/// storage layout below, so the order and types of the state variables are fixed.
contract StaveGovernance {
    /// What a proposal changes.
    enum Action {
        AddMember, // target: the member's address; value: its weight
        RemoveMember, // target: the member's address
        SetThreshold, // value: the new threshold
        AddValidator, // target: the validator's ed25519 consensus key
        RemoveValidator, // target: the validator's key
        AddNode, // target: the node's id
        RemoveNode, // target: the node's id
        SetRestrictions, // value: RESTRICT_DEPLOY | RESTRICT_SEND, the lists in force
        SetRights, // target: an account's address; value: MAY_DEPLOY | MAY_SEND (0 revokes)
        Freeze, // target: an account's or a contract's address
        Unfreeze // target: a frozen address
    }

    /// `restrictions` bits: only accounts with the matching right may deploy contracts,
    /// or send transactions at all.
    uint256 internal constant RESTRICT_DEPLOY = 1;
    uint256 internal constant RESTRICT_SEND = 2;
    /// `rightsOf` bits, the same as the restrictions they lift.
    uint256 internal constant MAY_DEPLOY = 1;
    uint256 internal constant MAY_SEND = 2;

    struct Proposal {
        Action action;
        bytes32 target;
        uint256 value;
        uint256 expires;
        uint256 weight;
        bool executed;
    }

    // Slot 0 onwards, in this order (docs/governance.md).
    address[] internal members;
    mapping(address => uint256) public weightOf;
    uint256 public threshold;
    uint256 public proposalLifetime;
    uint256 public minValidators;
    bytes32[] internal validators;
    mapping(bytes32 => bool) public isValidator;
    bytes32[] internal nodes;
    mapping(bytes32 => bool) public isNode;
    Proposal[] internal proposals;
    mapping(uint256 => mapping(address => bool)) public voted;
    uint256 public restrictions;
    mapping(address => uint256) public rightsOf;
    mapping(address => bool) public frozen;
    uint256 public frozenCount;

    event Proposed(uint256 indexed id, Action action, bytes32 target, uint256 value, address indexed proposer);
    event Voted(uint256 indexed id, address indexed member, uint256 weight);
    event Executed(uint256 indexed id, Action action, bytes32 target, uint256 value);

    modifier onlyMember() {
        require(weightOf[msg.sender] > 0, "not a committee member");
        _;
    }

    /// Proposes a change and votes for it; returns its id.
    function propose(Action action, bytes32 target, uint256 value) external onlyMember returns (uint256 id) {
        check(action, target, value);
        id = proposals.length;
        proposals.push(Proposal(action, target, value, block.number + proposalLifetime, 0, false));
        emit Proposed(id, action, target, value, msg.sender);
        castVote(id);
    }

    /// Votes for proposal `id`.
    function vote(uint256 id) external onlyMember {
        require(id < proposals.length, "no such proposal");
        castVote(id);
    }

    function castVote(uint256 id) internal {
        Proposal storage p = proposals[id];
        require(!p.executed, "proposal already applied");
        require(block.number <= p.expires, "proposal expired");
        require(!voted[id][msg.sender], "already voted");
        voted[id][msg.sender] = true;
        p.weight += weightOf[msg.sender];
        emit Voted(id, msg.sender, weightOf[msg.sender]);
        if (p.weight >= threshold) {
            // The state may have changed since the proposal: checked again.
            check(p.action, p.target, p.value);
            p.executed = true;
            execute(p.action, p.target, p.value);
            emit Executed(id, p.action, p.target, p.value);
        }
    }

    /// Reverts with the reason if `action` cannot apply to the current state.
    function check(Action action, bytes32 target, uint256 value) internal view {
        if (action == Action.AddMember) {
            require(uint256(target) >> 160 == 0, "not an address");
            require(weightOf[address(uint160(uint256(target)))] == 0, "already a member");
            require(value > 0, "a member's weight must be positive");
        } else if (action == Action.RemoveMember) {
            uint256 weight = weightOf[address(uint160(uint256(target)))];
            require(weight > 0, "not a committee member");
            require(totalWeight() - weight >= threshold, "the rest of the committee would be below the threshold");
        } else if (action == Action.SetThreshold) {
            require(value > 0 && value <= totalWeight(), "threshold must be between 1 and the committee's weight");
        } else if (action == Action.AddValidator) {
            require(target != bytes32(0), "unknown key");
            require(!isValidator[target], "already a validator");
        } else if (action == Action.RemoveValidator) {
            require(isValidator[target], "unknown key");
            require(validators.length > minValidators, "the validator set would be below its minimum");
        } else if (action == Action.AddNode) {
            require(target != bytes32(0), "unknown node");
            require(!isNode[target], "already admitted");
        } else if (action == Action.RemoveNode) {
            require(isNode[target], "unknown node");
        } else if (action == Action.SetRestrictions) {
            require(value <= (RESTRICT_DEPLOY | RESTRICT_SEND), "unknown restriction");
        } else if (action == Action.SetRights) {
            require(uint256(target) >> 160 == 0, "not an address");
            require(value <= (MAY_DEPLOY | MAY_SEND), "unknown right");
        } else if (action == Action.Freeze) {
            require(uint256(target) >> 160 == 0, "not an address");
            require(address(uint160(uint256(target))) != address(this), "the governance contract cannot be frozen");
            require(!frozen[address(uint160(uint256(target)))], "already frozen");
        } else {
            require(frozen[address(uint160(uint256(target)))], "not frozen");
        }
    }

    function execute(Action action, bytes32 target, uint256 value) internal {
        if (action == Action.AddMember) {
            address member = address(uint160(uint256(target)));
            members.push(member);
            weightOf[member] = value;
        } else if (action == Action.RemoveMember) {
            address member = address(uint160(uint256(target)));
            weightOf[member] = 0;
            removeAddress(members, member);
        } else if (action == Action.SetThreshold) {
            threshold = value;
        } else if (action == Action.AddValidator) {
            validators.push(target);
            isValidator[target] = true;
        } else if (action == Action.RemoveValidator) {
            isValidator[target] = false;
            removeKey(validators, target);
        } else if (action == Action.AddNode) {
            nodes.push(target);
            isNode[target] = true;
        } else if (action == Action.RemoveNode) {
            isNode[target] = false;
            removeKey(nodes, target);
        } else if (action == Action.SetRestrictions) {
            restrictions = value;
        } else if (action == Action.SetRights) {
            rightsOf[address(uint160(uint256(target)))] = value;
        } else if (action == Action.Freeze) {
            frozen[address(uint160(uint256(target)))] = true;
            frozenCount += 1;
        } else {
            frozen[address(uint160(uint256(target)))] = false;
            frozenCount -= 1;
        }
    }

    function removeAddress(address[] storage list, address item) internal {
        for (uint256 i = 0; i < list.length; i++) {
            if (list[i] == item) {
                list[i] = list[list.length - 1];
                list.pop();
                return;
            }
        }
    }

    function removeKey(bytes32[] storage list, bytes32 item) internal {
        for (uint256 i = 0; i < list.length; i++) {
            if (list[i] == item) {
                list[i] = list[list.length - 1];
                list.pop();
                return;
            }
        }
    }

    function totalWeight() public view returns (uint256 total) {
        for (uint256 i = 0; i < members.length; i++) {
            total += weightOf[members[i]];
        }
    }

    /// The committee's members, in order.
    function getMembers() external view returns (address[] memory) {
        return members;
    }

    /// The validators' ed25519 consensus keys, in order.
    function getValidators() external view returns (bytes32[] memory) {
        return validators;
    }

    /// The non-validator nodes admitted to the P2P network, by node id.
    function getNodes() external view returns (bytes32[] memory) {
        return nodes;
    }

    /// How many proposals were made.
    function proposalCount() external view returns (uint256) {
        return proposals.length;
    }

    /// Proposal `id`.
    function getProposal(uint256 id) external view returns (Proposal memory) {
        require(id < proposals.length, "no such proposal");
        return proposals[id];
    }
}
